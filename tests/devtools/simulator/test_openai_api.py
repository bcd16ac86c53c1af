"""The simulator speaks the OpenAI API exactly as the installed SDK parses it (strict validation on)."""

from __future__ import annotations

import math

import openai

from devtools.simulator.testing import SimulatorProcess

RAG_PROMPT = (
    "Answer from the sources and cite them.\n"
    "[1] Passwords are reset from the account settings page.\n"
    "[2] A reset link is valid for one hour.\n"
    "Question: how do I reset my password?"
)


async def test_models_list(llm_client: openai.AsyncOpenAI) -> None:
    models = await llm_client.models.list()
    assert [m.id for m in models.data] == ["sim-llm", "sim-embedding"]


async def test_chat_stream_with_usage(llm_client: openai.AsyncOpenAI) -> None:
    stream = await llm_client.chat.completions.create(
        model="any-model",
        messages=[{"role": "user", "content": RAG_PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert finish == ["stop"]
    assert chunks[-1].choices == []
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens > 20 and usage.total_tokens == usage.prompt_tokens + 12
    assert text.startswith("Summary: Answer from the sources and cite them Question [1].")
    assert "[1]" in text
    assert all(c.model == "any-model" and c.id == chunks[0].id for c in chunks)


async def test_chat_non_streaming_is_deterministic(llm_client: openai.AsyncOpenAI) -> None:
    async def ask() -> openai.types.chat.ChatCompletion:
        return await llm_client.chat.completions.create(model="m", messages=[{"role": "user", "content": RAG_PROMPT}])

    first, second = await ask(), await ask()
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None and first.usage.completion_tokens == 12


async def test_chat_max_tokens_cuts_with_length(llm_client: openai.AsyncOpenAI) -> None:
    completion = await llm_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello there"}], max_completion_tokens=5
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 5


async def test_chinese_question_gets_chinese_answer(llm_client: openai.AsyncOpenAI) -> None:
    completion = await llm_client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "[1] 密碼可以在帳戶設定頁面重設。"},
            {"role": "user", "content": "我要怎麼重設密碼？"},
        ],
        max_tokens=40,
    )
    text = completion.choices[0].message.content or ""
    assert text.startswith("摘要：我要怎麼重設密碼")
    assert "[1]" in text
    assert not any("a" <= ch.lower() <= "z" for ch in text)


async def test_chat_stream_helper_accumulates(llm_client: openai.AsyncOpenAI) -> None:
    async with llm_client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "what is the refund policy"}]
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    assert (final.choices[0].message.content or "").startswith("Summary: what is the refund policy")


async def test_responses_stream_with_usage(llm_client: openai.AsyncOpenAI) -> None:
    stream = await llm_client.responses.create(model="m", input=RAG_PROMPT, stream=True)
    events = [event async for event in stream]
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "".join(deltas)
    usage = completed.response.usage
    assert usage is not None and usage.output_tokens == 12 == len(deltas)
    assert usage.input_tokens > 20 and usage.total_tokens == usage.input_tokens + 12


async def test_responses_stream_helper_and_non_streaming(llm_client: openai.AsyncOpenAI) -> None:
    async with llm_client.responses.stream(model="m", input="how do refunds work") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    response = await llm_client.responses.create(
        model="m", input=[{"role": "user", "content": "how do refunds work"}], instructions="Be brief."
    )
    assert final.output_text.startswith("Summary: how do refunds work")
    assert response.status == "completed" and response.instructions == "Be brief."
    assert response.output_text.startswith("Summary: how do refunds work")
    assert response.usage is not None and response.usage.output_tokens == 12


async def test_responses_max_output_tokens_is_incomplete(llm_client: openai.AsyncOpenAI) -> None:
    response = await llm_client.responses.create(model="m", input="hi", max_output_tokens=16)
    assert response.status == "completed"
    cut = await llm_client.responses.create(model="m", input="hi", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert cut.usage is not None and cut.usage.output_tokens == 3


async def test_embeddings(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    texts = ["reset my password", "reset my password please", "重設密碼"]
    # The SDK asks for base64 by default and decodes it; float is what other clients get.
    async with openai.AsyncOpenAI(base_url=simulator.base_url, api_key="x", max_retries=0) as lenient:
        default = await lenient.embeddings.create(model="e", input=texts)
    floats = await llm_client.embeddings.create(model="e", input=texts, encoding_format="float")
    small = await llm_client.embeddings.create(model="e", input="x", dimensions=64, encoding_format="float")
    vectors = [d.embedding for d in floats.data]
    assert [len(v) for v in vectors] == [384, 384, 384] and len(small.data[0].embedding) == 64
    for decoded, exact in zip(default.data, floats.data, strict=True):
        pairs = zip(decoded.embedding, exact.embedding, strict=True)
        assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in pairs)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-9) for v in vectors)
    cosine = sum(a * b for a, b in zip(vectors[0], vectors[1], strict=True))
    assert cosine > 0.5  # shared words point the same way
    assert floats.usage.prompt_tokens > 0
    assert (await simulator.astats())["endpoints"]["embeddings"]["attempts"] == 3
