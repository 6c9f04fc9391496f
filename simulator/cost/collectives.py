"""Alpha-beta cost of NCCL-style collectives over a HardwareProfile, per algorithm.

Notation (formulas.md §0, §4): `n` ranks in the group, `k` of them inside one NVLink domain
(`ranks_per_node`; a DGX node, or the 72-GPU rack of GB200 NVL72), `N = n / k` domains, `M` the
message size **as nccl-tests defines it** (formulas.md §4.2): the full buffer — the all-reduce
buffer, the gathered output of all-gather, the input of reduce-scatter, the per-rank send buffer of
all-to-all, the payload of a point-to-point send.

Per-rank bandwidths (per direction) used by every algorithm:

    B_intra(k, M) = B_nvlink * eta_nvlink_ring(M)                 (switch: NVSwitch crossbar)
                  = min(B_nvlink, (k-1) * B_link) * eta(M)         (mesh: MI300X, one link per peer)
    B_inter(M)    = B_nic_per_gpu * eta_network(M) / oversub      (oversub only if the group
                                                                   crosses the spine)

`eta(M)` are the profile's measured efficiency tables (`[efficiency.*]`, interpolated in log10 M);
they carry the protocol/message-size roll-off, `alpha` (per hop: `nvlink_latency_s`,
`ib_latency_s`) carries the fixed cost. Every function broadcasts over numpy arrays of `M`, `n`, `k`
(the sweep evaluates ~1e6 layouts at once) and returns seconds; one rank ⇒ 0 s.

Algorithm choice: `algorithm="auto"` returns the fastest applicable algorithm element-wise (what
NCCL's tuner tries to do), NVLS only from the profile's `nvls_min_bytes` on (`nvls_eligible`: where the
measured tuner does not run it); a named algorithm forces it and returns `inf` where it does not apply
(tree or NVLS-tree inside a single domain, NVLS on hardware without it).

Per-hop latencies and the size curves are per fabric: measured where a sweep exists (NVLink3 from the
A100 rows, NVLink5, AWS EFA v4 and GCP GPUDirect-TCPXO fitted by simulator/calibrate/fabric_fit.py;
docs/collectives.md), NCCL's tuning constants otherwise (InfiniBand 9.6 us per hop).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..spec.hardware import HardwareProfile

__all__ = [
    "ALGORITHMS",
    "all_reduce_s",
    "all_gather_s",
    "reduce_scatter_s",
    "all_to_all_s",
    "p2p_s",
    "broadcast_s",
    "best_algorithm",
    "nvls_eligible",
    "bus_factor",
    "intra_bandwidth_bytes_per_s",
    "inter_bandwidth_bytes_per_s",
]

ALGORITHMS = {
    "all_reduce": ("ring", "tree", "hierarchical", "nvls"),
    "all_gather": ("ring", "hierarchical"),
    "reduce_scatter": ("ring", "hierarchical"),
    "broadcast": ("ring",),
    "all_to_all": ("pairwise",),
    "p2p": ("direct",),
}

_BUS_FACTOR = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "broadcast": "1", "p2p": "1"}


def bus_factor(collective: str, n):
    """nccl-tests busbw/algbw factor (NVIDIA/nccl-tests doc/PERFORMANCE.md; formulas.md §4.2).

    all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, p2p 1.
    """
    n = np.asarray(n, dtype=float)
    if collective == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1.0) / n
    if collective in ("broadcast", "p2p"):
        return np.ones_like(n)
    raise InputError(f"unknown collective {collective!r}; expected one of {', '.join(_BUS_FACTOR)}")


# ---- group shape -----------------------------------------------------------------------------
def _shape(n_ranks, ranks_per_node, crosses_spine):
    """(n, k, N, spine) float arrays from numbers or a topology.GroupSpan."""
    if hasattr(n_ranks, "ranks_per_domain"):  # a GroupSpan from simulator.cost.topology
        span = n_ranks
        n_ranks, ranks_per_node, crosses_spine = span.size, span.ranks_per_domain, span.crosses_spine
    n = np.asarray(n_ranks, dtype=float)
    k = n if ranks_per_node is None else np.asarray(ranks_per_node, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n < 1):
        raise InputError(f"n_ranks must be >= 1, got {np.asarray(n_ranks).ravel()[:4].tolist()}")
    if np.any(~np.isfinite(k)) or np.any(k < 1):
        raise InputError(f"ranks_per_node must be >= 1, got {np.asarray(ranks_per_node).ravel()[:4].tolist()}")
    k = np.minimum(k, n)
    N = np.ceil(n / k - 1e-9)
    spine = np.asarray(False if crosses_spine is None else crosses_spine, dtype=bool)
    return n, k, N, spine


def _message(message_bytes):
    m = np.asarray(message_bytes, dtype=float)
    if np.any(~np.isfinite(m)) or np.any(m < 0):
        raise InputError(f"message_bytes must be finite and >= 0, got {np.asarray(message_bytes).ravel()[:4].tolist()}")
    return m


def _eff(profile: HardwareProfile, name: str, m, fallback: str | None = None):
    if not profile.has_efficiency(name) and fallback is not None:
        name = fallback
    return profile.interp_efficiency(name, np.maximum(m, 1.0))


def intra_bandwidth_bytes_per_s(profile: HardwareProfile, ranks_per_node, message_bytes, *, curve: str = "nvlink_ring"):
    """Achieved per-rank bandwidth inside one NVLink domain for k ranks there, per direction.

    switch: `B_nvlink * eta(M)`; mesh (point-to-point Infinity Fabric): `min(B_nvlink, (k-1) B_link)
    * eta(M)` — a group of k GPUs can use only the k-1 links to its peers
    (stas00/ml-engineering network chapter: MI300X 2-GPU all-reduce ≈ 1/7 of the 8-GPU bandwidth).
    """
    k = np.asarray(ranks_per_node, dtype=float)
    raw = np.full_like(k, profile.nvlink_bytes_per_s)
    if profile.nvlink_topology == "mesh":
        raw = np.minimum(raw, np.maximum(k - 1.0, 1.0) * profile.nvlink_link_bytes_per_s)
    return raw * _eff(profile, curve, message_bytes, fallback="nvlink_ring")


def inter_bandwidth_bytes_per_s(profile: HardwareProfile, message_bytes, crosses_spine=False):
    """Achieved scale-out bandwidth of one GPU (its NIC share), per direction.

    `B_nic_per_gpu * eta_network(M) / leaf_oversubscription` (the last factor only for traffic that
    crosses the spine). B_nic_per_gpu = nics_per_node * nic_bytes_per_s / gpus_per_node.
    """
    over = np.where(np.asarray(crosses_spine, dtype=bool), profile.leaf_oversubscription, 1.0)
    return profile.nic_bytes_per_s_per_gpu * _eff(profile, "network", message_bytes) / over


def _ring_bw(profile, k, N, spine, m):
    """Bottleneck per-rank bandwidth of a flat ring over N domains with k ranks in each.

    Every rank sends the same volume; where N > 1 the ring leaves each domain through the NIC
    shares of its k ranks, so the domain-boundary rate is k * B_inter (rings are spread over the
    rails, one channel per NIC).
    """
    intra = intra_bandwidth_bytes_per_s(profile, k, m)
    inter = k * inter_bandwidth_bytes_per_s(profile, m, spine)
    return np.where(N > 1, np.minimum(intra, inter), intra)


def _ring_latency_s(profile, n, N, steps_per_rank: float):
    """Ring latency: `steps * [(n - N) * a_nvlink + N * a_net] / (n - 1)`-weighted hops.

    A ring of n ranks over N domains has N inter-domain hops and n - N intra-domain hops per
    revolution (NCCL tuning.cc ring latency: `(nRanks - nNodes) * intraLat + nNodes * interLat`
    per pass). `steps_per_rank` passes of (n-1) steps: 2 for all-reduce, 1 for AG/RS.
    """
    hops_inter = np.where(N > 1, N, 0.0)
    hops_intra = n - 1.0 - np.where(N > 1, N - 1.0, 0.0)
    return steps_per_rank * (np.maximum(hops_intra, 0.0) * profile.nvlink_latency_s + hops_inter * profile.ib_latency_s)


def _log2_ceil(x):
    return np.ceil(np.log2(np.maximum(x, 1.0)))


# ---- all-reduce ------------------------------------------------------------------------------
def ring_all_reduce_s(profile, m, n, k, N, spine):
    """Ring all-reduce: `T = 2(n-1)/n * M / B_ring + 2 * [(n-N) a_nv + N a_net]`.

    Single domain: `2(n-1)/n * M / B + 2(n-1) * alpha` (Thakur, Rabenseifner & Gropp 2005;
    formulas.md §4.1). B_ring = min(B_intra, k * B_inter) across domains.
    """
    t = 2.0 * (n - 1.0) / n * m / _ring_bw(profile, k, N, spine, m) + _ring_latency_s(profile, n, N, 2.0)
    return np.where(n > 1, t, 0.0)


def _tree_inter_volume(m, N):
    """Bytes each domain sends out in NCCL's double binary tree all-reduce [derived].

    Every domain is an inner node of one tree and a leaf of the other; each tree carries M/2. An
    inner node sends M/2 up and M/2 to each of two children, a leaf M/2 up: 2M per domain. With
    two domains each tree is root + leaf: M per domain (the 2-node speed-up noted in formulas.md §4.4).
    """
    return np.where(N <= 2, m, 2.0 * m)


def tree_all_reduce_s(profile, m, n, k, N, spine):
    """NCCL tree all-reduce (double binary tree across domains, chain inside; NCCL >= 2.4).

    Pipelined: `T = max(M / B_intra, V_tree(M, N) / (k * B_inter)) + 2[(k-1) a_nv + ceil(log2 N) a_net]`
    (latency: NCCL `src/graph/tuning.cc` tree latency `2((n/N - 1) intraLat + log2(N) interLat)`;
    inside a domain the chain carries M up and M down, i.e. M per direction). Not defined for a
    single domain (NCCL uses tree only across nodes): inf there.
    """
    bw = np.maximum(m / intra_bandwidth_bytes_per_s(profile, k, m),
                    _tree_inter_volume(m, N) / (k * inter_bandwidth_bytes_per_s(profile, m, spine)))
    lat = 2.0 * ((k - 1.0) * profile.nvlink_latency_s + _log2_ceil(N) * profile.ib_latency_s)
    return np.where(n <= 1, 0.0, np.where(N > 1, bw + lat, np.inf))


def hierarchical_all_reduce_s(profile, m, n, k, N, spine):
    """Two-level all-reduce: intra reduce-scatter -> inter-domain ring all-reduce of M/k on each of
    the k rails in parallel -> intra all-gather (formulas.md §4.4, [derived, standard]):

    `T = 2[(k-1)/k * M/B_intra + (k-1) a_nv] + 2(N-1)/N * (M/k) / B_inter + 2(N-1) a_net`.
    Not pipelined (the phases run one after the other).
    """
    intra = 2.0 * ((k - 1.0) / k * m / intra_bandwidth_bytes_per_s(profile, k, m) + (k - 1.0) * profile.nvlink_latency_s)
    inter = 2.0 * (N - 1.0) / N * (m / k) / inter_bandwidth_bytes_per_s(profile, m / k, spine) + 2.0 * (N - 1.0) * profile.ib_latency_s
    return np.where(n > 1, intra + inter, 0.0)


def nvls_all_reduce_s(profile, m, n, k, N, spine):
    """NVLink SHARP all-reduce (NVSwitch reduces and multicasts; formulas.md §4.3).

    One domain: each GPU sends and receives M once, `T = M / (B_nvlink * eta_nvls(M)) + a_nvls`;
    `eta_nvls` is the measured algbw fraction (≈ 275/450 on H100/H200: nccl-tests #212), which is
    nearly independent of k (H200 5..8 GPUs: algbw 259-270 GB/s, stas00/ml-engineering). Across
    domains NCCL's NVLSTree: NVLS inside, tree across, pipelined:
    `max(M / B_nvls, V_tree(M, N) / (k B_inter)) + a_nvls + 2 ceil(log2 N) a_net`.
    `a_nvls` (profile `nvls_latency_s`) is a fixed cost per call: NVLS runs a multi-stage protocol
    (reduce-load, multicast-store, barrier), far slower to start than one NVLink hop.
    inf where the profile has no NVLS.
    """
    if not profile.nvls:
        return np.where(n > 1, np.inf, 0.0) + 0.0 * m
    b_nvls = profile.nvlink_bytes_per_s * _eff(profile, "nvls", m)
    intra = m / b_nvls
    inter = _tree_inter_volume(m, N) / (k * inter_bandwidth_bytes_per_s(profile, m, spine))
    bw = np.where(N > 1, np.maximum(intra, inter), intra)
    lat = profile.nvls_latency_s + 2.0 * _log2_ceil(N) * profile.ib_latency_s
    return np.where(n > 1, bw + lat, 0.0)


_AR = {"ring": ring_all_reduce_s, "tree": tree_all_reduce_s, "hierarchical": hierarchical_all_reduce_s,
       "nvls": nvls_all_reduce_s}


def nvls_eligible(profile: HardwareProfile, m):
    """Whether NCCL's tuner runs NVLS (or NVLSTree) for an `auto` all-reduce of M bytes: `M >= nvls_min_bytes`.

    NCCL picks the algorithm with its own cost model (NVIDIA/nccl src/graph/tuning.cc: per algorithm and
    protocol `time = latency + bytes / bandwidth`, the smallest wins), not with the wire's. On 8x B200
    (NCCL 2.27.7) the measured sweep runs at ring speed up to 4 GiB and NVLS from 8 GiB (calibration rows
    b200_1node_ar_4GiB, b200_8gpu_ar_8GiB_default): profile `[node] nvls_min_bytes` (default 0, every
    size) says so. A forced `nvls` ignores it.
    """
    return np.asarray(m, dtype=float) >= profile.nvls_min_bytes


def _auto_times(table, profile, m, n, k, N, spine) -> dict:
    """{algorithm: seconds} of every algorithm `auto` may pick (NVLS only where `nvls_eligible`)."""
    out = {a: f(profile, m, n, k, N, spine) for a, f in table.items()}
    if "nvls" in out:
        out["nvls"] = np.where(nvls_eligible(profile, m), out["nvls"], np.inf)
    return out


def _dispatch(table, collective, algorithm, profile, m, n, k, N, spine):
    if algorithm == "auto":
        return np.minimum.reduce(list(_auto_times(table, profile, m, n, k, N, spine).values()))
    try:
        f = table[algorithm]
    except KeyError:
        raise InputError(f"unknown {collective} algorithm {algorithm!r}; expected auto, {', '.join(table)}") from None
    if algorithm == "nvls" and not profile.nvls:
        raise InputError(f"hardware {profile.name!r} has no NVLS (NVLink SHARP); pick another algorithm")
    return f(profile, m, n, k, N, spine)


def all_reduce_s(profile: HardwareProfile, message_bytes, n_ranks, ranks_per_node=None,
                 algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for an all-reduce of an M-byte buffer over `n_ranks` ranks, `ranks_per_node` of them
    per NVLink domain (default: all in one). `n_ranks` may be a topology.GroupSpan instead.

    algorithm: auto | ring | tree | hierarchical | nvls (see the functions of the same name).
    """
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    return _dispatch(_AR, "all_reduce", algorithm, profile, m, n, k, N, spine)


def best_algorithm(profile: HardwareProfile, collective: str, message_bytes, n_ranks, ranks_per_node=None,
                   *, crosses_spine=False) -> np.ndarray:
    """Name of the algorithm `auto` picks, element-wise (array of str)."""
    table = {"all_reduce": _AR, "all_gather": _AG, "reduce_scatter": _AG}.get(collective)
    if table is None:
        return np.full(np.broadcast(np.asarray(message_bytes), np.asarray(n_ranks)).shape, ALGORITHMS[collective][0])
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    each = _auto_times(table, profile, m, n, k, N, spine)
    names = list(each)
    times = np.stack(np.broadcast_arrays(*each.values()))
    return np.asarray(names)[np.argmin(times, axis=0)]


# ---- all-gather / reduce-scatter --------------------------------------------------------------
def ring_all_gather_s(profile, m, n, k, N, spine):
    """Ring all-gather / reduce-scatter: `T = (n-1)/n * M / B_ring + [(n-N) a_nv + N a_net]`
    (Thakur et al. 2005; formulas.md §4.1; M = the full gathered buffer)."""
    t = (n - 1.0) / n * m / _ring_bw(profile, k, N, spine, m) + _ring_latency_s(profile, n, N, 1.0)
    return np.where(n > 1, t, 0.0)


def hierarchical_all_gather_s(profile, m, n, k, N, spine):
    """Two-level all-gather (or reduce-scatter, mirrored): inter-domain ring on each rail of the
    M/k slice, then intra-domain ring of the full buffer [derived, formulas.md §4.4]:

    `T = (N-1)/N * (M/k) / B_inter + (N-1) a_net + (k-1)/k * M / B_intra + (k-1) a_nv`.
    """
    inter = (N - 1.0) / N * (m / k) / inter_bandwidth_bytes_per_s(profile, m / k, spine) + (N - 1.0) * profile.ib_latency_s
    intra = (k - 1.0) / k * m / intra_bandwidth_bytes_per_s(profile, k, m) + (k - 1.0) * profile.nvlink_latency_s
    return np.where(n > 1, inter + intra, 0.0)


_AG = {"ring": ring_all_gather_s, "hierarchical": hierarchical_all_gather_s}


def all_gather_s(profile: HardwareProfile, message_bytes, n_ranks, ranks_per_node=None,
                 algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for an all-gather whose gathered output is M bytes (nccl-tests size)."""
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    return _dispatch(_AG, "all_gather", algorithm, profile, m, n, k, N, spine)


def reduce_scatter_s(profile: HardwareProfile, message_bytes, n_ranks, ranks_per_node=None,
                     algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for a reduce-scatter whose input is M bytes per rank (nccl-tests size).

    Same wire volume and algorithms as all-gather (reduction cost ignored: it hides under the
    transfer on GPUs).
    """
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    return _dispatch(_AG, "reduce_scatter", algorithm, profile, m, n, k, N, spine)


# ---- all-to-all, broadcast, p2p -------------------------------------------------------------
def all_to_all_s(profile: HardwareProfile, message_bytes, n_ranks, ranks_per_node=None,
                 algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for an all-to-all; M = the per-rank send buffer (incl. its own chunk; nccl-tests).

    Each rank sends M/n to each peer at once: (k-1)/n·M over NVLink, (n-k)/n·M over the network.
    All ranks of a domain send across at the same time and all-to-all cannot aggregate NICs, so the
    network term uses one GPU's NIC share (formulas.md §4.5; NCCL maintainer, nccl-tests #267):

    `T = max((k-1)/n * M / B_intra, (n-k)/n * M / B_inter) + (k-1) a_nv + (n-k) a_net`
    (pairwise-exchange latency, Thakur et al. 2005). Mesh topologies: B_intra = (k-1)·B_link.
    """
    if algorithm not in ("auto", "pairwise"):
        raise InputError(f"unknown all_to_all algorithm {algorithm!r}; expected auto, pairwise")
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    intra = (k - 1.0) / n * m / intra_bandwidth_bytes_per_s(profile, k, m)
    inter = (n - k) / n * m / inter_bandwidth_bytes_per_s(profile, m, spine)
    lat = (k - 1.0) * profile.nvlink_latency_s + (n - k) * profile.ib_latency_s
    return np.where(n > 1, np.maximum(intra, inter) + lat, 0.0)


def broadcast_s(profile: HardwareProfile, message_bytes, n_ranks, ranks_per_node=None,
                algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for a pipelined ring (chain) broadcast of M bytes: `T = M / B_ring + (n-1) alpha`
    (NCCL ring broadcast; nccl-tests busbw factor 1)."""
    if algorithm not in ("auto", "ring"):
        raise InputError(f"unknown broadcast algorithm {algorithm!r}; expected auto, ring")
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    t = m / _ring_bw(profile, k, N, spine, m) + _ring_latency_s(profile, n, N, 1.0)
    return np.where(n > 1, t, 0.0)


def p2p_s(profile: HardwareProfile, message_bytes, n_ranks=2, ranks_per_node=None,
          algorithm: str = "auto", *, crosses_spine=False):
    """Seconds for one point-to-point send of M bytes: `T = alpha + M / B` (formulas.md §4.1).

    The pair is inside one NVLink domain when `ranks_per_node >= n_ranks` (default), else it crosses
    the network. For a ring of n_ranks neighbours (ring attention, pipeline stages) this is the
    slowest hop. B inside: `eta_nvlink_p2p(M) * B_nvlink` (mesh: one link); across:
    `B_inter(M)`.
    """
    if algorithm not in ("auto", "direct"):
        raise InputError(f"unknown p2p algorithm {algorithm!r}; expected auto, direct")
    m = _message(message_bytes)
    n, k, N, spine = _shape(n_ranks, ranks_per_node, crosses_spine)
    link = profile.nvlink_bytes_per_s if profile.nvlink_topology == "switch" else profile.nvlink_link_bytes_per_s
    b_intra = link * _eff(profile, "nvlink_p2p", m, fallback="nvlink_ring")
    b_inter = inter_bandwidth_bytes_per_s(profile, m, spine)
    t = np.where(N > 1, m / b_inter + profile.ib_latency_s, m / b_intra + profile.nvlink_latency_s)
    return np.where(n > 1, t, 0.0)
