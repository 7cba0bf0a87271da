"""What the tiny-family generators (tests/gen_minimax_m2.py, gen_llama4.py; glm4moe writes its head widths in between) write alike.

Imported from the generators (their folder is on sys.path when they run as scripts).
"""
from gguf_tiny import T


def write_common_kvs(w, arch, name, c, n_block=None):
    """general.* and the hyper-parameters every MoE family has, in the order llama.cpp's converter writes
    them; n_block: block_count when it is not c["n_layer"] (NextN blocks appended)."""
    A, U = arch + ".", T.UINT32
    w.add("general.architecture", arch)
    w.add("general.name", name)
    w.add("general.file_type", 0, U)
    w.add(A + "block_count", c["n_layer"] if n_block is None else n_block, U)
    w.add(A + "context_length", c["ctx"], U)
    w.add(A + "embedding_length", c["n_embd"], U)
    w.add(A + "feed_forward_length", c["n_ff"], U)
    w.add(A + "attention.head_count", c["n_head"], U)
    w.add(A + "attention.head_count_kv", c["n_head_kv"], U)
    w.add(A + "rope.freq_base", float(c["rope_theta"]), T.FLOAT32)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c["eps"]), T.FLOAT32)
    w.add(A + "expert_count", c["n_expert"], U)
    w.add(A + "expert_used_count", c["n_expert_used"], U)
