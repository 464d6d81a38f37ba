"""Fault injection for the verification workers, read from `GPURIG_VERIFY_INJECT`.

The tests make the real verification code fail through this variable, so the code users run and
the code the tests run are the same. Syntax: faults separated by ";", each `kind:key=value,...`:

    perturb:rank=1                 rank 1 changes one element of a collective's result
    perturb:rank=1,op=all_gather   ... only in all_gather
    skip-collective:rank=1,op=broadcast   rank 1 never arrives at its first broadcast (a hang)
    ddp-grad:rank=1                rank 1 alters one gradient after DDP's all-reduce
    p2p-corrupt:rank=0             rank 0 flips a byte after a peer copy (GPU only)
    raise:rank=1,op=all_to_all     rank 1 raises instead of entering that collective (a crash)
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENV_VAR = "GPURIG_VERIFY_INJECT"
KINDS = ("perturb", "skip-collective", "ddp-grad", "p2p-corrupt", "raise")


class InjectError(ValueError):
    pass


@dataclass
class Fault:
    kind: str
    rank: int
    op: str | None = None
    fired: bool = False
    params: dict[str, str] = field(default_factory=dict)

    def applies(self, rank: int, op: str | None = None) -> bool:
        return self.rank == rank and (self.op is None or op is None or self.op == op)


def parse_faults(text: str | None) -> list[Fault]:
    """Parse the variable; raises `InjectError` naming the bad part."""
    faults: list[Fault] = []
    if not text or not text.strip():
        return faults
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        kind, _, rest = part.partition(":")
        kind = kind.strip()
        if kind not in KINDS:
            raise InjectError(f"{ENV_VAR}: unknown fault {kind!r} (known: {', '.join(KINDS)})")
        params: dict[str, str] = {}
        for item in filter(None, (x.strip() for x in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise InjectError(f"{ENV_VAR}: {item!r} in {part!r} is not key=value")
            params[key.strip()] = value.strip()
        if "rank" not in params:
            raise InjectError(f"{ENV_VAR}: {part!r} needs rank=N")
        try:
            rank = int(params.pop("rank"))
        except ValueError:
            raise InjectError(f"{ENV_VAR}: rank in {part!r} must be an integer") from None
        faults.append(Fault(kind=kind, rank=rank, op=params.pop("op", None), params=params))
    return faults


def find(faults: list[Fault], kind: str, rank: int, op: str | None = None) -> Fault | None:
    """The first unfired fault of `kind` for this rank (and op); each fault fires once."""
    for f in faults:
        if f.kind == kind and not f.fired and f.applies(rank, op):
            return f
    return None
