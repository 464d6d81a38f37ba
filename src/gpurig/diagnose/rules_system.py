"""Doctor rules about the host and the environment: /dev/shm, CUDA_* and NCCL_* variables."""

from __future__ import annotations

from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, env_flag, human_bytes, is_nvlink_pair

DOCKER_DEFAULT_SHM = 64 * 2**20
SHM_ENOUGH = 1 * 2**30  # DataLoader workers pass whole batches through /dev/shm


def shared_memory(ctx: Context) -> list[Finding]:
    s = ctx.facts.system
    if s.shm_total_bytes is None:
        return []
    size = human_bytes(s.shm_total_bytes)
    ev = {"system.shm_total_bytes": s.shm_total_bytes, "system.shm_free_bytes": s.shm_free_bytes,
          "system.container": s.container}
    if s.shm_total_bytes < SHM_ENOUGH:
        docker_default = s.shm_total_bytes <= DOCKER_DEFAULT_SHM
        where = ""
        if s.container and docker_default:
            where = f" This is the {s.container} default for a container started without `--ipc=host`."
        elif docker_default:
            where = " That is the size Docker gives a container by default."
        fix = ("Start the container with `--ipc=host` (or `--shm-size=16g`): e.g. `docker run --gpus all --ipc=host ...`; "
               "in Kubernetes mount an `emptyDir: {medium: Memory}` volume at /dev/shm")
        if not s.container:
            fix = "`sudo mount -o remount,size=16G /dev/shm` (and set the size in /etc/fstab to keep it)"
        return [Finding(
            id="shm-too-small", severity="error" if docker_default else "warn", area="system",
            title=f"/dev/shm is only {size}",
            detail=("PyTorch DataLoader workers hand batches over through /dev/shm and NCCL's SHM transport "
                    "uses it too; when it fills, workers die with \"bus error\" or NCCL fails to extend a "
                    "segment." + where),
            fix=fix, evidence=ev,
        )]
    return [Finding(
        id="shm-ok", severity="ok", area="system",
        title=f"/dev/shm has {size}" + (" (container shares the host's IPC or has a large --shm-size)"
                                        if s.container else ""),
        detail="Enough for DataLoader workers and NCCL's shared-memory transport.",
        fix="Nothing to do", evidence=ev,
    )]


def visible_devices(ctx: Context) -> list[Finding]:
    raw = ctx.env.get("CUDA_VISIBLE_DEVICES")
    vis = ctx.visibility
    if raw is None or vis is None:
        return []  # unset, or no GPU to check it against
    n = len(ctx.gpus)
    ev = {"CUDA_VISIBLE_DEVICES": raw, "gpu_count": n, "visible": vis.visible, "problems": vis.problems}
    if raw.strip() == "":
        return [Finding(
            id="cuda-visible-devices-empty", severity="error", area="environment",
            title="CUDA_VISIBLE_DEVICES is empty: every GPU is hidden",
            detail=f"The machine has {n} GPU(s), but CUDA programs started from this shell see none and run on the CPU.",
            fix="`unset CUDA_VISIBLE_DEVICES` (or list the GPUs to use, e.g. `export CUDA_VISIBLE_DEVICES=0,1`)",
            evidence=ev,
        )]
    has_mig = any(e.strip().startswith("MIG-") for e in raw.split(","))
    # MIG instance UUIDs are not in the snapshot, so an unmatched MIG- entry is not judged.
    problems = [p for p in vis.problems if not (has_mig and "matches no GPU UUID" in p)]
    missing = [p for p in problems if "does not exist" in p or "matches no" in p]
    malformed = [p for p in problems if p not in missing]
    seen = ", ".join(map(str, vis.visible)) or "none"
    if malformed:
        return [Finding(
            id="cuda-visible-devices-malformed", severity="error", area="environment",
            title=f"CUDA_VISIBLE_DEVICES={raw!r} is malformed",
            detail=(f"{'; '.join(malformed)}. CUDA stops reading at the first bad entry, so programs see GPU(s): "
                    f"{seen}."),
            fix=f"Use indices or UUIDs separated by commas, e.g. `export CUDA_VISIBLE_DEVICES={','.join(map(str, range(n)))}`",
            evidence=ev,
        )]
    if missing:
        return [Finding(
            id="cuda-visible-devices-missing-gpu", severity="error", area="environment",
            title=f"CUDA_VISIBLE_DEVICES={raw!r} names a GPU this machine does not have",
            detail=(f"{'; '.join(missing)}. CUDA stops at that entry, so programs see GPU(s): {seen}."),
            fix=f"List existing GPUs only (0 to {n - 1}, see `nvidia-smi -L`), e.g. "
                f"`export CUDA_VISIBLE_DEVICES={','.join(map(str, range(n)))}`",
            evidence=ev,
        )]
    if len(vis.visible) < n and not has_mig:
        hidden = sorted(set(range(n)) - set(vis.visible))
        return [Finding(
            id="cuda-visible-devices-hides-gpus", severity="warn", area="environment",
            title=f"CUDA_VISIBLE_DEVICES={raw!r} hides {len(hidden)} of {n} GPUs",
            detail=f"Training started from this shell uses GPU(s) {seen} only; hidden: {', '.join(map(str, hidden))}.",
            fix="Fine if deliberate; to use every GPU, `unset CUDA_VISIBLE_DEVICES`",
            evidence=ev,
        )]
    return []


def device_order(ctx: Context) -> list[Finding]:
    names = {g.name for g in ctx.gpus if g.name}
    ccs = {g.compute_capability for g in ctx.gpus if g.compute_capability}
    if len(names) < 2 and len(ccs) < 2:
        return []
    order = ctx.env.get("CUDA_DEVICE_ORDER")
    if order is not None and order.strip().upper() == "PCI_BUS_ID":
        return []
    return [Finding(
        id="cuda-device-order", severity="warn", area="environment",
        title="Different GPUs, and CUDA_DEVICE_ORDER is not PCI_BUS_ID",
        detail=(f"CUDA_DEVICE_ORDER is {order or 'unset (FASTEST_FIRST)'}: CUDA numbers the fastest GPU 0, so "
                "CUDA's GPU numbers differ from nvidia-smi's and CUDA_VISIBLE_DEVICES picks other GPUs than you meant."),
        fix="`export CUDA_DEVICE_ORDER=PCI_BUS_ID` (in your shell profile or job script)",
        evidence={"CUDA_DEVICE_ORDER": order, "models": sorted(names), "compute_capabilities": sorted(ccs)},
    )]


def nccl_transports(ctx: Context) -> list[Finding]:
    env = ctx.env
    findings = []
    pairs = ctx.facts.pairs
    nv_pairs = [p for p in pairs if is_nvlink_pair(p.link, p.nvlink_count)]
    p2p_pairs = [p for p in pairs if p.p2p_read]
    level = (env.get("NCCL_P2P_LEVEL") or "").strip().upper()
    p2p_off = env_flag(env, "NCCL_P2P_DISABLE") or level in ("LOC", "0")
    setting = (f"NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']}" if env_flag(env, "NCCL_P2P_DISABLE")
               else f"NCCL_P2P_LEVEL={env.get('NCCL_P2P_LEVEL')}")
    unset = "NCCL_P2P_DISABLE" if env_flag(env, "NCCL_P2P_DISABLE") else "NCCL_P2P_LEVEL"
    if p2p_off and len(ctx.gpus) >= 2:
        ev = {setting.split("=")[0]: setting.split("=", 1)[1], "nvlink_pairs": len(nv_pairs),
              "p2p_pairs": len(p2p_pairs), "pairs": len(pairs)}
        if nv_pairs or p2p_pairs:
            via = f"{len(nv_pairs)} GPU pair(s) are joined by NVLink" if nv_pairs else \
                f"{len(p2p_pairs)} GPU pair(s) have PCIe peer access"
            findings.append(Finding(
                id="nccl-p2p-disabled", severity="warn", area="environment",
                title=f"{setting} turns off peer-to-peer, yet {via}",
                detail=("NCCL copies every message through host memory (SHM) instead: all-reduce runs many times "
                        "slower" + (" than NVLink allows." if nv_pairs else " than PCIe peer access allows.")
                        + " It is a common leftover from working around a hang on another machine."),
                fix=f"`unset {unset}` (and remove it from ~/.bashrc, the Dockerfile or the job script); then "
                    "`gpurig verify` to confirm peer-to-peer works",
                evidence=ev,
            ))
        elif pairs and all(p.p2p_read is False for p in pairs):
            pass  # no pair has peer access anyway: the setting changes nothing
        else:
            findings.append(Finding(
                id="nccl-p2p-disabled", severity="info", area="environment",
                title=f"{setting} turns off NCCL's peer-to-peer transport",
                detail="The snapshot does not say whether these GPUs support peer access, so its cost is unknown.",
                fix=f"If it was set to work around a hang, keep it; otherwise `unset {unset}` and run `gpurig verify`",
                evidence=ev,
            ))
    if env_flag(env, "NCCL_SHM_DISABLE") and len(ctx.gpus) >= 2:
        needs_shm = p2p_off or any(p.p2p_read is False and not is_nvlink_pair(p.link, p.nvlink_count) for p in pairs)
        findings.append(Finding(
            id="nccl-shm-disabled", severity="warn" if needs_shm else "info", area="environment",
            title=f"NCCL_SHM_DISABLE={env['NCCL_SHM_DISABLE']} turns off NCCL's shared-memory transport",
            detail=("Pairs without peer-to-peer then fall back to network sockets through the loopback "
                    "interface, which is much slower." if needs_shm else
                    "Harmless while every pair talks peer-to-peer, but it removes the fallback."),
            fix="`unset NCCL_SHM_DISABLE` (if /dev/shm was the problem, enlarge it instead: `--ipc=host`)",
            evidence={"NCCL_SHM_DISABLE": env["NCCL_SHM_DISABLE"], "p2p_disabled": bool(p2p_off)},
        ))
    if env_flag(env, "NCCL_IB_DISABLE"):
        findings.append(Finding(
            id="nccl-ib-disabled", severity="info", area="environment",
            title=f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']}: InfiniBand/RoCE off",
            detail=("Within one machine NCCL does not use InfiniBand, so single-machine training is unaffected; "
                    "across machines it forces TCP sockets, which is far slower where InfiniBand or RoCE "
                    "adapters exist (the snapshot does not list network adapters)."),
            fix="For multi-machine jobs on InfiniBand/RoCE: `unset NCCL_IB_DISABLE` and check `ibv_devinfo`",
            evidence={"NCCL_IB_DISABLE": env["NCCL_IB_DISABLE"]},
        ))
    forced = {k: env[k] for k in ("NCCL_ALGO", "NCCL_PROTO") if env.get(k)}
    if forced:
        findings.append(Finding(
            id="nccl-algo-forced", severity="info", area="environment",
            title="NCCL algorithm or protocol forced: " + ", ".join(f"{k}={v}" for k, v in forced.items()),
            detail="NCCL's tuner picks these per message size; forcing them is meant for debugging and is "
                   "usually slower.",
            fix="`unset " + " ".join(forced) + "` unless you measured that it helps",
            evidence=forced,
        ))
    return findings


RULES = [shared_memory, visible_devices, device_order, nccl_transports]
