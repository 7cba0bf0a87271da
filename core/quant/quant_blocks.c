/* quant_blocks.c - constant tables of the block formats; see quant_blocks.h. */
#include "core/quant/quant_blocks.h"

const int8_t coli_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* E2M1: sign bit, 2 exponent bits (bias 1), 1 mantissa bit; codes 0..7 are
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 their negatives (8 is -0 = 0). */
const int8_t coli_kvalues_mxfp4[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};
