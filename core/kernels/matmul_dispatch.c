/*
 * matmul_dispatch.c - the kernel table: one entry per (weight type, path),
 * where a path is portable or AVX2 with one mm_skip_vnni mask. All of them
 * are built once, at first use, from core/cpu_features; choosing one at a
 * call is an index, so a switch between calls (tests, bench_matmul) takes
 * effect at once and never races a table being written.
 */
#include "core/kernels/matmul_dispatch.h"

#include <pthread.h>
#include <stdatomic.h>

#include "core/cpu_features.h"
#include "core/kernels/matmul.h"

#define MM_N_TYPES 64          /* every type id is below 64 (tensor.h) */
#define MM_N_MASKS 8           /* mm_skip_vnni masks */
#define MM_PORTABLE MM_N_MASKS /* the path index of the portable kernels */

static atomic_int s_force_portable;
static atomic_int s_skip; /* mm_skip_vnni */
static mm_kernel s_table[MM_N_MASKS + 1][MM_N_TYPES];
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

void coli_matmul_force_portable(int on) { atomic_store(&s_force_portable, on != 0); }
void mm_skip_vnni(int mask) { atomic_store(&s_skip, mask & MM_SKIP_ALL_VNNI); }

static int s_path(void) {
    if (atomic_load(&s_force_portable) || !coli_cpu_avx2()) return MM_PORTABLE;
    return atomic_load(&s_skip);
}

/* The Q8_0 / Q4_0 tiles of the best integer dot the CPU has, skip aside. */
static mm_qtile_isa s_qtile_isa(int skip) {
    if (!(skip & MM_SKIP_AVX512) && coli_cpu_avx512()) return MM_QTILE_AVX512;
    if (!(skip & MM_SKIP_AVXVNNI) && coli_cpu_avxvnni()) return MM_QTILE_AVXVNNI;
    if (!(skip & MM_SKIP_AVX512VNNI) && coli_cpu_avx512vnni()) return MM_QTILE_AVX512VNNI;
    return MM_QTILE_AVX2;
}

/* A block type's dot products on a path: portable (one token at a time),
 * or AVX2, or the 512-bit ones where the type has them (the same bits). */
static void s_blocks_entry(mm_kernel *k, const mm_vecdot_type *v, int path) {
    k->input = MM_IN_BLOCKS;
    k->input_kind = 100 + (int)v->act;
    k->blocks = v;
    k->rows = mm_vecdot_rows;
    if (path == MM_PORTABLE) {
        k->dot = v->portable;
        return;
    }
    const int wide = v->avx512 && coli_cpu_avx512() && !(path & MM_SKIP_AVX512);
    k->dot = wide ? v->avx512 : v->avx2;
    k->dot_tokens = wide ? v->avx512_tokens : v->avx2_tokens;
    if (v->iq_decode) {
        k->iq_decode = v->iq_decode;
        k->iq_dots =
            coli_cpu_avx512() && !(path & MM_SKIP_AVX512) ? coli_iq_decoded_dots_avx512 : coli_iq_decoded_dots_avx2;
    }
}

/* Input kinds: 0 none (F32), 1 fp16-rounded, 2 bf16-rounded, 3 Q8_0 values
 * and scales (Q8_0 and Q4_0 weights), 100 + the activation block type. */
static void s_build_entry(mm_kernel *k, coli_dtype t, int path) {
    const int portable = path == MM_PORTABLE;
    const mm_vecdot_type *v = mm_vecdot_find(t);
    if (v) {
        s_blocks_entry(k, v, path);
        return;
    }
    k->rows = portable ? mm_portable_rows(t) : mm_avx2_rows(t, s_qtile_isa(path));
    if (t == COLI_F16 || t == COLI_BF16) {
        k->input = MM_IN_ROUNDED;
        k->input_kind = t == COLI_F16 ? 1 : 2;
        k->round = portable ? mm_portable_round_rows : mm_avx2_round_rows;
    } else if (t == COLI_Q8_0 || t == COLI_Q4_0) {
        k->input = MM_IN_Q8_0;
        k->input_kind = 3;
        k->quantize = portable ? mm_portable_quantize_rows : mm_avx2_quantize_rows;
    }
}

static void s_build(void) {
    for (int path = 0; path <= MM_PORTABLE; path++)
        for (int t = 0; t < MM_N_TYPES; t++) s_build_entry(&s_table[path][t], (coli_dtype)t, path);
}

const mm_kernel *mm_kernel_for(coli_dtype wtype) {
    pthread_once(&s_once, s_build);
    return &s_table[s_path()][(unsigned)wtype % MM_N_TYPES];
}

const char *coli_matmul_impl(void) {
    const int path = s_path();
    if (path == MM_PORTABLE) return "portable";
    static const char *const names[] = {
        [MM_QTILE_AVX2] = "avx2",
        [MM_QTILE_AVXVNNI] = "avx2+avxvnni",
        [MM_QTILE_AVX512VNNI] = "avx2+avx512vnni",
        [MM_QTILE_AVX512] = "avx2+avx512",
    };
    return names[s_qtile_isa(path)];
}
