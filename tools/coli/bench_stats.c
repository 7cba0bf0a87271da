/* bench_stats.c - quantiles of `coli bench`; see bench.h. */
#include <stdlib.h>

#include "tools/coli/bench.h"

static int s_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_quantile(double *v, int n, double q) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, s_cmp_double);
    int rank = (int)(q * n + 0.999999); /* nearest rank: ceil(q n), at least 1 */
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}
