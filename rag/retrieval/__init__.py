"""Retrieval: Markdown loading and chunking, embeddings, BM25, the Qdrant store, index builds, the retriever."""
