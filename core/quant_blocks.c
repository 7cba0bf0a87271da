/* quant_blocks.c - constant tables of the block formats; see quant_blocks.h. */
#include "core/quant_blocks.h"

const int8_t coli_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};
