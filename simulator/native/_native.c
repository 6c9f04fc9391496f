/* The replay's inner loops, compiled at install time and called through ctypes
   (simulator/native/__init__.py).

   Loops that each have an exact counterpart in numpy in the package (tests compare them bit for
   bit): the levelling rounds of pipeline/compiled.py (`_levels_numpy`); the longest-path recurrence of
   pipeline/replay.py (`evaluate_levels` + `busy_per_rank`) for many layouts of many schedule shapes,
   with and without one uniform p2p delay:
       start(op) = max(end(rank predecessor), end(dep) + p2p, end(dep2) + p2p2)
       end(op)   = start(op) + duration(op)
   the replay tables of a schedule shape from its op columns (`Schedule.arrays`, `compile_schedule`,
   `_packed`, `_busy_table`, `inflight_profile`); and a flushed schedule's op columns from its
   description (schedules/op.py `flush_columns`), alone or straight into its tables.
   Besides the replay, three array helpers of the sweep kernel: left-to-right row sums (np.cumsum's
   order), first-appearance group numbers (pandas.factorize's numbering) and per-rank sums of
   per-stage values (structure.PipelineTable.rank_sum's bincounts).
   Plain C99 with no Python API in the loops: the caller owns every array (C-contiguous, the dtypes
   simulator/native declares or, for raw addresses, makes), so the GIL is released for the whole call
   (ctypes does that for CDLL).
   Compiled with -ffp-contract=off: no fused multiply-add, so every sum rounds as numpy's does. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Levels: round k takes, on every rank, the next op in its order if its dependencies were taken in
   an earlier round. level (n + 1) and ptr (R, holding the rank starts) are scratch the caller gives;
   out (n) receives the ops in level order, offs (n + 1) the level offsets. Returns the number of
   levels, or -1 on deadlock (ptr then holds each rank's stuck op). */
int64_t parasim_levels(int64_t R, const int64_t *ends, const int64_t *dep, const int64_t *dep2, int64_t n,
                       int64_t *level, int64_t *ptr, int64_t *out, int64_t *offs) {
    for (int64_t i = 0; i < n; i++) level[i] = INT64_MAX;
    level[n] = -1; /* sentinel: "no dependency" is always satisfied */
    int64_t count = 0, k = 0;
    offs[0] = 0;
    while (count < n) {
        int64_t taken = 0;
        for (int64_t r = 0; r < R; r++) {
            int64_t h = ptr[r];
            if (h < ends[r] && level[dep[h]] < k && level[dep2[h]] < k) {
                level[h] = k;
                out[count++] = h;
                taken++;
                ptr[r] = h + 1;
            }
        }
        if (taken == 0) return -1;
        offs[++k] = count;
    }
    return k;
}

/* Many shapes: row r runs shape sid[r], whose ops are packed in level order at op_off[k]..op_off[k+1]
   (code = 4 * stage + {0 F, 1 B, 2 B + W, 3 W}; dep, dep2, rp as positions in that order, n = none;
   hop bit 1/2: dep/dep2 crosses a stage boundary). One uniform delay P[r] per boundary; writes the
   makespan with and without it, and adds busy time per rank from the (rank, stage) op counts
   b_count (E, 4) at busy_off[k]..busy_off[k+1]. F/B/W (N, S), out_busy (N, R).
   The rows of a shape run LANES at a time: each op's indices are read once for all lanes, whose
   arithmetic is independent and runs as vector operations (GCC/Clang vector extensions: SSE2 on
   baseline x86-64, AVX2 where the CPU has it, through target_clones), ~2x faster than one row at a
   time; other compilers run one row at a time. Every lane does the scalar recurrence's
   operations in the same order (vmax(x, y) = x > y ? x : y is the scalar `if (x > y) y = x`), so
   the results are bit for bit those of the numpy reference.
   Returns 0, or -1 if scratch memory could not be allocated. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(PARASIM_PLAIN_LANES)
#define LANES 4
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* vectors passed to static inline helpers only: no ABI is crossed */
#endif
typedef double vd __attribute__((vector_size(8 * LANES)));
typedef int64_t vl __attribute__((vector_size(8 * LANES)));

static inline vd vadd(vd x, vd y) { return x + y; }

static inline vd vmax(vd x, vd y) {
    vl m = x > y;
    return (vd)(((vl)x & m) | ((vl)y & ~m));
}

static inline vd vload(const double *p) {
    vd v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(double *p, vd v) { __builtin_memcpy(p, &v, sizeof v); }
#else
#define LANES 1 /* one row at a time */
typedef struct { double v[LANES]; } vd;

static inline vd vadd(vd x, vd y) {
    for (int l = 0; l < LANES; l++) x.v[l] = x.v[l] + y.v[l];
    return x;
}

static inline vd vmax(vd x, vd y) {
    for (int l = 0; l < LANES; l++) if (x.v[l] > y.v[l]) y.v[l] = x.v[l];
    return y;
}

static inline vd vload(const double *p) {
    vd v;
    for (int l = 0; l < LANES; l++) v.v[l] = p[l];
    return v;
}

static inline void vstore(double *p, vd v) {
    for (int l = 0; l < LANES; l++) p[l] = v.v[l];
}
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void replay_lanes(int64_t n, int64_t ns, int64_t R, int64_t S, int64_t lanes, const int64_t *rows,
                         const int32_t *code, const int32_t *dep, const int32_t *dep2, const int32_t *rp,
                         const int32_t *hop, const int64_t *b_rank, const int64_t *b_stage, const double *b_count,
                         int64_t e_lo, int64_t e_hi, const double *F, const double *B, const double *W,
                         const double *P, double *out_mk, double *out_mk0, double *out_busy, double *end, double *end0,
                         double *dur) {
    double pl[LANES];
    for (int64_t l = 0; l < LANES; l++) {
        int64_t r = rows[l < lanes ? l : lanes - 1]; /* idle lanes repeat the last row; not written back */
        const double *f = F + r * S, *b = B + r * S, *w = W + r * S;
        for (int64_t s = 0; s < ns; s++) {
            dur[(4 * s) * LANES + l] = f[s];
            dur[(4 * s + 1) * LANES + l] = b[s] + 0.0;
            dur[(4 * s + 2) * LANES + l] = b[s] + w[s];
            dur[(4 * s + 3) * LANES + l] = w[s];
        }
        pl[l] = P[r];
    }
    double zl[LANES] = {0.0};
    vd zero = vload(zl), p = vload(pl), mk = zero, mk0 = zero;
    vstore(end + n * LANES, zero);
    vstore(end0 + n * LANES, zero);
    for (int64_t j = 0; j < n; j++) {
        int64_t a = dep[j], a2 = dep2[j], q = rp[j];
        int32_t h = hop[j];
        vd d = vload(dur + (int64_t)code[j] * LANES);
        vd t = vadd(vload(end + a * LANES), (h & 1) ? p : zero), t0 = vload(end0 + a * LANES);
        if (a2 < n) {
            t = vmax(vadd(vload(end + a2 * LANES), (h & 2) ? p : zero), t);
            t0 = vmax(vload(end0 + a2 * LANES), t0);
        }
        t = vmax(vload(end + q * LANES), t);
        t0 = vmax(vload(end0 + q * LANES), t0);
        vd e = vadd(t, d), e0 = vadd(t0, d);
        vstore(end + j * LANES, e);
        vstore(end0 + j * LANES, e0);
        mk = vmax(e, mk);
        mk0 = vmax(e0, mk0);
    }
    double m[LANES], m0[LANES];
    vstore(m, mk);
    vstore(m0, mk0);
    for (int64_t l = 0; l < lanes; l++) {
        int64_t r = rows[l];
        const double *f = F + r * S, *b = B + r * S, *w = W + r * S;
        out_mk[r] = m[l];
        out_mk0[r] = m0[l];
        for (int64_t e = e_lo; e < e_hi; e++) {
            int64_t s = b_stage[e];
            const double *c = b_count + 4 * e;
            out_busy[r * R + b_rank[e]] += (c[0] * f[s] + c[1] * b[s] + c[2] * (b[s] + w[s]) + c[3] * w[s]);
        }
    }
}

int64_t parasim_replay_multi(int64_t N, int64_t S, int64_t R, const int64_t *sid, const int64_t *op_off,
                             const int32_t *code, const int32_t *dep, const int32_t *dep2, const int32_t *rp,
                             const int32_t *hop, const int64_t *stage_off, const int64_t *busy_off,
                             const int64_t *b_rank, const int64_t *b_stage, const double *b_count,
                             const double *F, const double *B, const double *W, const double *P,
                             double *out_mk, double *out_mk0, double *out_busy) {
    int64_t K = 0, max_n = 0, max_s = 0;
    for (int64_t r = 0; r < N; r++) {
        int64_t k = sid[r];
        if (k + 1 > K) K = k + 1;
        if (op_off[k + 1] - op_off[k] > max_n) max_n = op_off[k + 1] - op_off[k];
        if (stage_off[k + 1] - stage_off[k] > max_s) max_s = stage_off[k + 1] - stage_off[k];
    }
    /* the rows of each shape, in row order (a counting sort by shape) */
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(K + 1 + N));
    size_t scratch = sizeof(double) * (size_t)(LANES * (2 * (max_n + 1) + 4 * max_s + 1));
    double *end = malloc(scratch);
    if (!first || !end) {
        free(first);
        free(end);
        return -1;
    }
    int64_t *order = first + K + 1;
    for (int64_t k = 0; k <= K; k++) first[k] = 0;
    for (int64_t r = 0; r < N; r++) first[sid[r] + 1]++;
    for (int64_t k = 0; k < K; k++) first[k + 1] += first[k];
    for (int64_t r = 0; r < N; r++) order[first[sid[r]]++] = r;
    for (int64_t k = K; k > 0; k--) first[k] = first[k - 1];
    first[0] = 0;
    double *end0 = end + LANES * (max_n + 1), *dur = end0 + LANES * (max_n + 1);
    for (int64_t k = 0; k < K; k++) {
        int64_t o = op_off[k], n = op_off[k + 1] - o, ns = stage_off[k + 1] - stage_off[k];
        for (int64_t i = first[k]; i < first[k + 1]; i += LANES) {
            int64_t lanes = first[k + 1] - i < LANES ? first[k + 1] - i : LANES;
            replay_lanes(n, ns, R, S, lanes, order + i, code + o, dep + o, dep2 + o, rp + o, hop + o, b_rank,
                         b_stage, b_count, busy_off[k], busy_off[k + 1], F, B, W, P, out_mk, out_mk0, out_busy,
                         end, end0, dur);
        }
    }
    free(first);
    free(end);
    return 0;
}

/* One op of `parasim_shape_tables`, in rank order: its dependency, second dependency and rank
   predecessor (n: none) and 4 * duration code + hop flags, together (16 bytes) so that the levelling
   rounds read one cache line per op instead of one per column. */
typedef struct {
    int32_t dep, dep2, rp, info;
} shape_op;

/* `parasim_levels` over shape_op, writing each op's packed row as it is placed: an op is taken in
   round k only once its dependencies were placed in an earlier round, and its rank predecessor was
   placed before it, so their positions are known then. lp (2 (n + 1), scratch) holds each op's round
   and position side by side (one cache line for both); op n is "none" (round -1, position n).
   Returns 0, or -1 on deadlock. */
static int64_t shape_levels_packed(int64_t R, const int64_t *offs, const shape_op *op, int64_t n, int32_t *lp,
                                   int64_t *ptr, int32_t *code, int32_t *pdep, int32_t *pdep2, int32_t *prp,
                                   int32_t *hop) {
    for (int64_t i = 0; i < n; i++) lp[2 * i] = INT32_MAX;
    lp[2 * n] = -1;
    lp[2 * n + 1] = (int32_t)n;
    for (int64_t r = 0; r < R; r++) ptr[r] = offs[r];
    int64_t count = 0;
    for (int32_t k = 0; count < n; k++) {
        int64_t taken = 0;
        for (int64_t r = 0; r < R; r++) {
            int64_t h = ptr[r];
            if (h >= offs[r + 1]) continue;
            shape_op o = op[h];
            if (lp[2 * (int64_t)o.dep] < k && lp[2 * (int64_t)o.dep2] < k) {
                lp[2 * h] = k;
                lp[2 * h + 1] = (int32_t)count;
                code[count] = o.info >> 2;
                hop[count] = o.info & 3;
                pdep[count] = lp[2 * (int64_t)o.dep + 1];
                pdep2[count] = lp[2 * (int64_t)o.dep2 + 1];
                prp[count] = lp[2 * (int64_t)o.rp + 1];
                count++;
                taken++;
                ptr[r] = h + 1;
            }
        }
        if (taken == 0) return -1;
    }
    return 0;
}

/* A schedule shape's replay tables straight from a builder's op columns (rank order; counts per
   rank): the dependency rule and checks of `Schedule.arrays`, the levels of `parasim_levels` and,
   as each op is placed, what `replay_multi` reads (`replay._packed`), the (rank, stage) pairs that
   run ops with their op counts per kind (`replay._busy_table`: b_rank, b_stage (capacity R * S),
   b_count (R * S * 4), in rank-then-stage order) and the in-flight peak per rank with unit weights
   (`replay.inflight_profile`, as integers). One pass each instead of numpy's dozens, over int32
   scratch (op counts below 2^31). Returns the number of busy pairs; -2 if the columns break a rule
   of `Schedule.arrays` and -3 on deadlock (the caller then runs the numpy path, which raises with
   the message), -1 if scratch memory could not be allocated or the shape is too large for int32. */
int64_t parasim_shape_tables(int64_t R, int64_t S, int64_t M, int64_t n, const int64_t *kind, const int64_t *stage,
                             const int64_t *mb, const uint8_t *incw, const uint8_t *paired, const int64_t *counts,
                             int32_t *code, int32_t *pdep, int32_t *pdep2, int32_t *prp, int32_t *hop,
                             int64_t *b_rank, int64_t *b_stage, double *b_count, int64_t *inflight) {
    int64_t SM = S * M, status = 0;
    if (n >= INT32_MAX / 4 || 3 * SM >= INT32_MAX || 4 * S >= INT32_MAX / 4) return -1;
    double *busy = calloc((size_t)(R * S * 4 + 1), sizeof(double));
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(3 * SM + 1));
    int32_t *w = malloc(sizeof(int32_t) * (size_t)(3 * (n + 1)));
    shape_op *op = malloc(sizeof(shape_op) * (size_t)(n + 1));
    int64_t *offs = malloc(sizeof(int64_t) * (size_t)(2 * (R + 1)));
    if (!busy || !table || !w || !op || !offs) {
        free(busy);
        free(table);
        free(w);
        free(op);
        free(offs);
        return -1;
    }
    int32_t *rank = w, *lp = rank + n + 1; /* lp: 2 (n + 1) */
    int64_t *ptr = offs + R + 1;
    offs[0] = 0;
    for (int64_t r = 0; r < R; r++) {
        offs[r + 1] = offs[r] + counts[r];
        for (int64_t i = offs[r]; i < offs[r + 1]; i++) rank[i] = (int32_t)r;
    }
    for (int64_t k = 0; k < 3 * SM; k++) table[k] = -1;
    for (int64_t i = 0; i < n; i++) { /* ranges, then no op twice */
        if (stage[i] < 0 || stage[i] >= S || mb[i] < 0 || mb[i] >= M || kind[i] < 0 || kind[i] > 2) goto invalid;
        int64_t key = (kind[i] * S + stage[i]) * M + mb[i];
        if (table[key] >= 0) goto invalid;
        table[key] = (int32_t)i;
    }
    for (int64_t k = 0; k < SM; k++) { /* F and B of every (stage, microbatch); W exactly when B lacks it */
        int64_t b = table[SM + k];
        if (table[k] < 0 || b < 0 || (table[2 * SM + k] >= 0) != !incw[b]) goto invalid;
    }
    for (int64_t i = 0; i < n; i++) { /* the one dependency rule (Schedule.arrays); hop bit 1 */
        int64_t s = stage[i], dk, ds;
        if (kind[i] == 0) {
            dk = 0;
            ds = s - 1;
        } else if (kind[i] == 1) {
            dk = s == S - 1 ? 0 : 1;
            ds = s == S - 1 ? s : s + 1;
        } else {
            dk = 1;
            ds = s;
        }
        int64_t d = (kind[i] == 0 && s == 0) ? -1 : table[(dk * S + (ds < 0 ? 0 : ds > S - 1 ? S - 1 : ds)) * M + mb[i]];
        int64_t code_i = 4 * s + (kind[i] == 0 ? 0 : kind[i] == 1 ? (incw[i] ? 2 : 1) : 3);
        op[i].dep = (int32_t)(d < 0 ? n : d);
        op[i].dep2 = (int32_t)n;
        op[i].rp = (int32_t)(i - 1);
        op[i].info = (int32_t)(4 * code_i + (d >= 0 && rank[d] != rank[i] && kind[i] != 2));
        busy[(rank[i] * S + s) * 4 + (code_i & 3)] += 1.0;
    }
    for (int64_t r = 0; r < R; r++)
        if (counts[r] > 0) op[offs[r]].rp = (int32_t)n;
    for (int64_t i = 0; i < n; i++) { /* paired ops also wait for their partner's input; hop bit 2 */
        if (paired[i]) {
            if (i + 1 >= n || rank[i + 1] != rank[i]) goto invalid;
            op[i].dep2 = op[i + 1].dep;
            op[i].info |= 2 * (op[i + 1].info & 1);
        }
    }
    op[n].dep = op[n].dep2 = op[n].rp = (int32_t)n;
    op[n].info = 0;
    if (shape_levels_packed(R, offs, op, n, lp, ptr, code, pdep, pdep2, prp, hop) < 0) {
        status = -3;
        goto done;
    }
    for (int64_t r = 0; r < R; r++) { /* +1 at F, -1 at the op that frees it (W, or B including W) */
        double acc = 0.0, peak = 0.0;
        for (int64_t i = offs[r]; i < offs[r + 1]; i++) {
            if (kind[i] == 0)
                acc += 1.0;
            else if (kind[i] == 2 || (kind[i] == 1 && incw[i]))
                acc -= 1.0;
            if (acc > peak) peak = acc;
        }
        inflight[r] = (int64_t)peak;
    }
    for (int64_t k = 0; k < R * S; k++) { /* the pairs that run ops, in key order (np.unique's) */
        const double *c = busy + 4 * k;
        if (c[0] != 0.0 || c[1] != 0.0 || c[2] != 0.0 || c[3] != 0.0) {
            b_rank[status] = k / S;
            b_stage[status] = k % S;
            memcpy(b_count + 4 * status, c, 4 * sizeof(double));
            status++;
        }
    }
    goto done;
invalid:
    status = -2;
done:
    free(busy);
    free(table);
    free(w);
    free(op);
    free(offs);
    return status;
}

/* Op columns of a flushed one-stage-per-rank schedule (schedules/op.py `flush_columns`): rank r runs
   min(warm[r], m) forwards (microbatches 0, 1, ...), then steps j = 0..m-1, each running slot c's op
   (kind skind[c], microbatch j + soff[c * R + r]) where that microbatch is in [0, m), slots in order,
   then the W's of microbatches tail[r]..m-1. `parasim_flush_counts` writes each rank's op count and
   returns their sum n; `parasim_flush_columns` writes kind, stage (the rank) and microbatch of the n
   ops, rank 0's first (counts may be NULL: the total only). */
static inline int64_t clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

int64_t parasim_flush_counts(int64_t R, int64_t m, int64_t ns, const int64_t *warm, const int64_t *soff,
                             const int64_t *tail, int64_t *counts) {
    int64_t total = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t c_r = clamp(warm[r], 0, m) + (m - clamp(tail[r], 0, m));
        for (int64_t c = 0; c < ns; c++) { /* j in [0, m) with 0 <= j + o < m */
            int64_t o = clamp(soff[c * R + r], -m, m);
            c_r += o >= 0 ? m - o : m + o;
        }
        if (counts) counts[r] = c_r;
        total += c_r;
    }
    return total;
}

void parasim_flush_columns(int64_t R, int64_t m, int64_t ns, const int64_t *warm, const int64_t *skind,
                           const int64_t *soff, const int64_t *tail, int64_t *kind, int64_t *stage, int64_t *mb) {
    int64_t i = 0;
    for (int64_t r = 0; r < R; r++) {
        for (int64_t j = 0, w = clamp(warm[r], 0, m); j < w; j++, i++) {
            kind[i] = 0;
            stage[i] = r;
            mb[i] = j;
        }
        for (int64_t j = 0; j < m; j++)
            for (int64_t c = 0; c < ns; c++) {
                int64_t x = j + soff[c * R + r];
                if (x >= 0 && x < m) {
                    kind[i] = skind[c];
                    stage[i] = r;
                    mb[i++] = x;
                }
            }
        for (int64_t j = clamp(tail[r], 0, m); j < m; j++, i++) {
            kind[i] = 2;
            stage[i] = r;
            mb[i] = j;
        }
    }
}

/* A flushed schedule's replay tables in one call, without its columns ever reaching Python: the
   columns of `parasim_flush_columns` (every B including W unless split, none paired), then
   `parasim_shape_tables` with one stage per rank. spec: warm (R), tail (R), slot kinds (ns), slot
   offsets (ns * R); n: `parasim_flush_counts`'s total. Outputs: packed (5 * n int32: code, dep,
   dep2, rank predecessor, hop), ints (2 * R * R + R: busy ranks, busy stages, in-flight peaks) and
   b_count (R * R * 4). Returns `parasim_shape_tables`'s value; -4 if n is not the op count. */
int64_t parasim_flush_tables(int64_t R, int64_t m, int64_t ns, int64_t split, const int64_t *spec, int64_t n,
                             int32_t *packed, int64_t *ints, double *b_count) {
    const int64_t *warm = spec, *tail = spec + R, *skind = spec + 2 * R, *soff = spec + 2 * R + ns;
    int64_t *cols = malloc(sizeof(int64_t) * (size_t)(3 * n + R + 1));
    uint8_t *flags = calloc((size_t)(2 * n + 1), 1);
    if (!cols || !flags) {
        free(cols);
        free(flags);
        return -1;
    }
    int64_t *kind = cols, *stage = cols + n, *mb = cols + 2 * n, *counts = cols + 3 * n, status = -4;
    uint8_t *incw = flags, *paired = flags + n;
    if (parasim_flush_counts(R, m, ns, warm, soff, tail, counts) == n) {
        parasim_flush_columns(R, m, ns, warm, skind, soff, tail, kind, stage, mb);
        if (!split)
            for (int64_t i = 0; i < n; i++) incw[i] = kind[i] == 1;
        status = parasim_shape_tables(R, R, m, n, kind, stage, mb, incw, paired, counts, packed, packed + n,
                                      packed + 2 * n, packed + 3 * n, packed + 4 * n, ints, ints + R * R,
                                      b_count, ints + 2 * R * R);
    }
    free(cols);
    free(flags);
    return status;
}

/* Sums of the rows of an (N, W) array, each left to right (numpy's cumsum order), so zeros padding a row
   change none of its bits; numpy's pairwise `sum` regroups rows of 8 or more values. */
void parasim_row_sums(int64_t N, int64_t W, const double *x, double *out) {
    for (int64_t r = 0; r < N; r++) {
        const double *v = x + r * W;
        double acc = W > 0 ? v[0] : 0.0;
        for (int64_t j = 1; j < W; j++) acc += v[j];
        out[r] = acc;
    }
}

/* Group numbers of N int64 codes, in order of first appearance (the numbering pandas.factorize gives):
   inv[i] is row i's group, first[g] the first row of group g. An open-addressing hash table of at least
   2N slots (Fibonacci hashing, linear probing). Returns the group count, or -1 if the table cannot be
   allocated. */
int64_t parasim_first_ids(int64_t N, const int64_t *code, int64_t *inv, int64_t *first) {
    int shift = 63;
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)N) { slots <<= 1; shift--; }
    int64_t *key = (int64_t *)malloc(slots * sizeof(int64_t));
    int64_t *group = (int64_t *)malloc(slots * sizeof(int64_t));
    if (!key || !group) { free(key); free(group); return -1; }
    memset(group, 0xff, slots * sizeof(int64_t));  /* every slot -1: empty */
    int64_t groups = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t c = code[i];
        uint64_t h = ((uint64_t)c * 0x9E3779B97F4A7C15ull) >> shift;
        while (group[h] >= 0 && key[h] != c) h = (h + 1) & (slots - 1);
        if (group[h] < 0) {
            key[h] = c;
            group[h] = groups;
            first[groups++] = i;
        }
        inv[i] = group[h];
    }
    free(key);
    free(group);
    return groups;
}

/* Per-rank sums of per-virtual-stage values, PipelineTable.rank_sum: out[i, r] (N, P) = the sum of x[i, s]
   (N, S) over the valid stages s of row i's shape (shape[i]; stage_rank, mirror_rank, valid: (U, S)) that
   rank r runs, in stage order, plus (with `mirrored`: some shape has dualpipe's second copies) the
   same sum over the stages whose mirror copy r holds: the additions numpy's two bincounts make, in
   their order (both skip nothing but zeros added to a padded stage's rank-0 entry). `acc` is scratch
   of 2P doubles. */
void parasim_rank_sum(int64_t N, int64_t S, int64_t P, const double *x, const int64_t *shape,
                      const int64_t *stage_rank, const int64_t *mirror_rank, const uint8_t *valid,
                      int64_t mirrored, double *acc, double *out) {
    for (int64_t i = 0; i < N; i++) {
        const int64_t u = shape[i];
        const double *xi = x + i * S;
        const int64_t *rk = stage_rank + u * S, *mr = mirror_rank + u * S;
        const uint8_t *ok = valid + u * S;
        double *a = acc, *b = acc + P, *o = out + i * P;
        for (int64_t r = 0; r < 2 * P; r++) acc[r] = 0.0;
        for (int64_t s = 0; s < S; s++) {
            if (!ok[s]) continue;
            a[rk[s]] += xi[s];
            if (mirrored && mr[s] >= 0) b[mr[s]] += xi[s];
        }
        for (int64_t r = 0; r < P; r++) o[r] = mirrored ? a[r] + b[r] : a[r];
    }
}

/* FSDP units on a communication stream beside the compute stream (simulator/cost/fsdp.py forward_pass and
   backward_pass, which hold the numpy reference and the rules): for each of N elements, L[i] units of
   c[i] compute, g[i] all-gather (and r[i] reduce-scatter in backward), prefetch d; writes the makespan of
   the pass, computed with the numpy loop's operations in its order. `ring` is scratch of d + 1 doubles. */
static inline double dmax(double a, double b) { return a > b ? a : b; }

void parasim_fsdp_forward(int64_t N, const double *c, const double *g, const double *L, int64_t d, double *ring,
                          double *out) {
    for (int64_t i = 0; i < N; i++) {
        double comm_free = 0.0, prev_end = 0.0;
        const int64_t n = (int64_t)L[i];
        for (int64_t k = 0; k < n; k++) {
            const double issue = d == 0 ? prev_end : (k >= d ? ring[(k - d) % (d + 1)] : 0.0);
            const double ag_end = dmax(comm_free, issue) + g[i];
            const double start = dmax(ag_end, prev_end);
            comm_free = ag_end;
            if (d > 0) ring[k % (d + 1)] = start;
            prev_end = start + c[i];
        }
        out[i] = prev_end;
    }
}

void parasim_fsdp_backward(int64_t N, const double *c, const double *g, const double *r, const double *L, int64_t d,
                           double *ring, double *out) {
    for (int64_t i = 0; i < N; i++) {
        double comm_free = 0.0, prev_end = 0.0;
        const int64_t n = (int64_t)L[i];
        const int64_t m = d + 1;
        for (int64_t k = 0; k < (d < n ? d : n); k++) {
            comm_free = comm_free + g[i];
            ring[k % m] = comm_free;
        }
        for (int64_t j = 0; j < n; j++) {
            double ag;
            if (d == 0) {
                if (g[i] > 0) { comm_free = dmax(comm_free, prev_end) + g[i]; ag = comm_free; }
                else ag = prev_end;
            } else {
                ag = ring[j % m];
            }
            const double start = dmax(ag, prev_end);
            const double end = start + c[i];
            if (d > 0 && j + d < n) {
                comm_free = dmax(comm_free, start) + g[i];
                ring[(j + d) % m] = comm_free;
            }
            comm_free = dmax(comm_free, end) + r[i];
            prev_end = end;
        }
        out[i] = dmax(prev_end, comm_free);
    }
}

/* An importable (empty) module, so the build and the loader find it by its package name. */
static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native",
                                           "parasim's replay loops; called through ctypes (simulator.native)", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
