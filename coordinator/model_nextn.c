/*
 * model_nextn.c - the multi-token-prediction (NextN, "MTP") blocks that
 * follow the trunk of glm4moe, qwen3next and qwen35moe files
 * (nextn_predict_layers; llama.cpp's load_block_mtp). They are the draft
 * model of speculative decoding: loaded and validated here, never run or
 * placed (plain decoding ignores them in llama.cpp too). Files without them
 * (converted with the trunk only) load as well.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/model_impl.h"
#include "core/error.h"

/* NextN block il: the family's block plus its projections and norms. */
static int s_load_block(const gguf_file *f, const model_hparams *hp, int il, model_layer_fn load_layer,
                        nextn_weights *nx) {
    const int64_t E = hp->n_embd, NV = hp->n_vocab;
    int rc;
    if ((rc = load_layer(f, hp, il, &nx->layer)) < 0 ||
        (rc = model_blk(f, il, "nextn.eh_proj.weight", 2, 2 * E, E, 1, MASK_MATRIX, 0, &nx->eh_proj)) < 0 ||
        (rc = model_blk(f, il, "nextn.enorm.weight", 1, E, 1, 1, MASK_F32, 0, &nx->enorm)) < 0 ||
        (rc = model_blk(f, il, "nextn.hnorm.weight", 1, E, 1, 1, MASK_F32, 0, &nx->hnorm)) < 0 ||
        (rc = model_blk(f, il, "nextn.embed_tokens.weight", 2, E, NV, 1, MASK_MATRIX, 1, &nx->embed_tokens)) < 0 ||
        (rc = model_blk(f, il, "nextn.shared_head_head.weight", 2, E, NV, 1, MASK_MATRIX, 1, &nx->head)) < 0 ||
        (rc = model_blk(f, il, "nextn.shared_head_norm.weight", 1, E, 1, 1, MASK_F32, 1, &nx->head_norm)) < 0)
        return rc;
    return 0;
}

int model_load_nextn(const gguf_file *f, model *m, model_layer_fn load_layer) {
    const model_hparams *hp = &m->hp;
    char name[128];
    /* as llama.cpp: the first block's eh_proj tells whether the file carries them */
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
    if (hp->n_layer_nextn == 0 || !gguf_find_tensor(f, name)) return 0;
    m->nextn = calloc((size_t)hp->n_layer_nextn, sizeof *m->nextn);
    if (!m->nextn) return coli_fail(COLI_ENOMEM, "model: out of memory for %d NextN blocks", hp->n_layer_nextn);
    for (int i = 0; i < hp->n_layer_nextn; i++) {
        int rc = s_load_block(f, hp, hp->n_layer + i, load_layer, &m->nextn[i]);
        if (rc < 0) return rc;
    }
    m->n_nextn = hp->n_layer_nextn;
    return 0;
}
