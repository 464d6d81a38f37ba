"""The memory patterns of `gpurig burn`, written and read back by kernels on the device.

Every 32-bit word of a pattern is a function of its address, so the check regenerates the value it
expects instead of keeping a copy: writing is one pass over the memory (a write) and checking is
one pass (a read, compared and counted in the same kernel). On a GPU both are fused by
`torch.compile` (Inductor writes one Triton kernel each), which is what lets the screen run near
the memory's copy bandwidth; on the CPU, and wherever compiling fails, the same functions run
eagerly.

Patterns (walking-ones and random change with each pass, so a cell stuck at the previous pass's
value shows):

- zeros, ones: every bit 0, every bit 1;
- walking-ones: one bit set, a different one in each pass and chunk;
- address: each word holds its own word address (catches address-line faults: two addresses
  that reach one cell);
- random: a multiplicative hash of the address and the pass (seeded, reproducible, dense in
  both bit values).
"""

from __future__ import annotations

import torch

PATTERNS = ("zeros", "ones", "walking-ones", "address", "random")
_GOLDEN = -1640531535  # 0x9E3779B1 as a signed 32-bit number (Knuth's multiplicative hash)
_MIX = -2048144789  # 0x85EBCA6B (MurmurHash3's finaliser)


def _int32(v: int) -> int:
    """`v` wrapped into the signed 32-bit range, as the device's arithmetic wraps it."""
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _words(start: int, n: int, params: torch.Tensor, hashed: bool, device: torch.device) -> torch.Tensor:
    x = torch.arange(start, start + n, device=device, dtype=torch.int32) * params[0] + params[1]
    if hashed:
        # Shifts made logical by a mask: an arithmetic shift would copy the sign bit, and XOR with
        # it would leave the top bit always 0.
        x = x * _GOLDEN
        x = x ^ ((x >> 15) & 0x1FFFF)
        x = x * _MIX
        x = x ^ ((x >> 13) & 0x7FFFF)
    return x


def _fill(buf: torch.Tensor, params: torch.Tensor, hashed: bool) -> None:
    buf.copy_(_words(0, buf.numel(), params, hashed, buf.device))


def _count_wrong(buf: torch.Tensor, params: torch.Tensor, hashed: bool) -> torch.Tensor:
    return (buf != _words(0, buf.numel(), params, hashed, buf.device)).sum()


class PatternKernels:
    """Fill a buffer with a pattern and count the words that differ from it, on the buffer's device."""

    def __init__(self, compile_kernels: bool) -> None:
        self.compiled: bool | str = False
        self._fill, self._count = _fill, _count_wrong
        if compile_kernels:
            try:
                self._fill = torch.compile(_fill, dynamic=False, fullgraph=True)
                self._count = torch.compile(_count_wrong, dynamic=False, fullgraph=True)
                self.compiled = True
            except Exception as exc:  # no compiler here: the eager kernels check the same words
                self.compiled = f"eager ({type(exc).__name__}: {exc})"[:200]

    def _call(self, which: str, *args):
        fn = self._fill if which == "fill" else self._count
        try:
            return fn(*args)
        except Exception as exc:
            if self.compiled is not True:
                raise
            # Compilation fails on first use (no C compiler, no Triton): fall back once, say so.
            self.compiled = f"eager ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"[:200]
            self._fill, self._count = _fill, _count_wrong
            return (_fill if which == "fill" else _count_wrong)(*args)

    @staticmethod
    def params(pattern: str, pass_no: int, chunks: int, words: int, device: torch.device | None = None) -> torch.Tensor:
        """One row [multiplier, addend, 0, 0] per chunk for one pass of a pattern, on the device: a
        tensor, not Python numbers, so one compiled kernel serves every pattern and chunk; one copy
        to the device per pattern; rows of 16 bytes, so every row is as aligned as the first."""
        rows = []
        for chunk in range(chunks):
            if pattern == "zeros":
                mul, add = 0, 0
            elif pattern == "ones":
                mul, add = 0, -1
            elif pattern == "walking-ones":
                mul, add = 0, 1 << ((pass_no + chunk) % 32)
            elif pattern == "address":
                # The word's address; 32-bit words wrap every 16 GiB, so blocks that far apart also
                # differ by a multiple of the block number (else an alias between them would not show).
                mul, add = 1, chunk * words + (chunk * words >> 32) * 0x3C6EF372
            elif pattern == "random":
                mul, add = 1, chunk * words + (chunk * words >> 32) * 0x3C6EF372 + pass_no * 0x5BD1E995
            else:
                raise ValueError(f"unknown memory pattern {pattern!r}")
            rows.append([_int32(mul), _int32(add), 0, 0])
        return torch.tensor(rows, dtype=torch.int32).to(device or "cpu")

    def fill(self, buf: torch.Tensor, params: torch.Tensor, pattern: str = "zeros") -> None:
        self._call("fill", buf, params, pattern == "random")

    def count_wrong(self, buf: torch.Tensor, params: torch.Tensor, pattern: str = "zeros") -> torch.Tensor:
        """The number of words that differ, as a tensor on the device (reading it waits for the kernel)."""
        return self._call("count", buf, params, pattern == "random")

    @staticmethod
    def locate(buf: torch.Tensor, params: torch.Tensor, pattern: str,
               slice_words: int = 1 << 24) -> tuple[int, int, int] | None:
        """(word offset, value read, value expected) of the first wrong word, slice by slice (eager:
        only after a count said something is wrong); None when no word is wrong any more (a cell
        that flipped back between the two reads)."""
        for lo in range(0, buf.numel(), slice_words):
            n = min(slice_words, buf.numel() - lo)
            want = _words(lo, n, params, pattern == "random", buf.device)
            bad = (buf[lo:lo + n] != want).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                return lo + i, int(buf[lo + i]), int(want[i])
        return None
