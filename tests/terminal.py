"""A program on a pseudo-terminal, for tests of what a terminal gets."""

from __future__ import annotations

import os
import select
import subprocess
import time


class Terminal:
    """A program on a pseudo-terminal (its stdin, stdout and stderr): what it wrote, read up
    to what the test waits for."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.fd, tty = os.openpty()
        self.process = subprocess.Popen(argv, stdin=tty, stdout=tty, stderr=tty, env=env,
                                        start_new_session=True)
        os.close(tty)
        self.text = ""

    def expect(self, marker: str, timeout: float = 300) -> str:
        """What the program wrote up to `marker` (dropped from what is left to read)."""
        deadline = time.monotonic() + timeout
        while marker not in self.text:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} after {timeout} s:\n{self.text[-3000:]}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the program ended (EIO)
                    chunk = b""
                assert chunk, f"ended before {marker!r}:\n{self.text[-3000:]}"
                self.text += chunk.decode("utf-8", errors="replace").replace("\r\n", "\n")
        before, _, self.text = self.text.partition(marker)
        return before

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")

    def statement(self, text: str, prompt: str, more: str) -> tuple[str, float]:
        """Type `text` line by line, each after the `more` prompt: what it printed up to the
        next `prompt`, and the seconds from its last line to that prompt."""
        lines = text.strip().splitlines()
        for line in lines[:-1]:
            self.type(line)
            self.expect(more)
        start = time.monotonic()
        self.type(lines[-1])
        return self.expect(prompt), time.monotonic() - start

    def close(self) -> int:
        """The program's exit status, once it ended; what it wrote after the last
        `expect` is left in `text`."""
        status = self.process.wait(timeout=120)
        while select.select([self.fd], [], [], 0)[0]:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.text += chunk.decode("utf-8", errors="replace").replace("\r\n", "\n")
        os.close(self.fd)
        return status
