"""gguf_write.py - a small GGUF v3 writer (numpy only) for the trained model.

Layout (GGUF v3): b"GGUF", u32 version, u64 n_tensors, u64 n_kv; KVs (string key, u32 type, value);
tensor infos (name, u32 n_dims, u64 ne[], u32 ggml type, u64 offset into the data section); padding
to the alignment (32); the data, every tensor padded to the alignment.
A numpy array of shape (d_{n-1}, ..., d_0) is stored with ne = [d_0, ..., d_{n-1}]: the last numpy
axis is ggml's contiguous ne[0], so a Linear weight (n_out, n_in) gets ne = [n_in, n_out].
"""
import struct

import numpy as np

ALIGN = 32
# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}
_NP = {U32: "<u4", I32: "<i4", F32: "<f4", BOOL: "<u1"}
GGML_TYPE = {"F32": 0, "F16": 1}


def _pad(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kvs = []       # (key, bytes of type + value)
        self.tensors = []   # (name, ne, type id, data bytes)

    def kv(self, key, vtype, value):
        if vtype == STR:
            body = _str(value)
        else:
            body = struct.pack(_FMT[vtype], value)
        self.kvs.append((key, struct.pack("<I", vtype) + body))

    def kv_array(self, key, elem_type, values):
        head = struct.pack("<IIQ", ARR, elem_type, len(values))
        if elem_type == STR:
            body = b"".join(_str(v) for v in values)
        else:
            body = np.asarray(values).astype(_NP[elem_type]).tobytes()
        self.kvs.append((key, head + body))

    def tensor(self, name, arr, dtype):
        """dtype "F32" or "F16" (numpy's float32 -> float16 cast rounds to nearest even)."""
        data = np.ascontiguousarray(arr, dtype="<f4" if dtype == "F32" else "<f2")
        self.tensors.append((name, list(reversed(arr.shape)), GGML_TYPE[dtype], data.tobytes()))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kvs)))
            for key, body in self.kvs:
                f.write(_str(key) + body)
            off = 0
            for name, ne, tid, data in self.tensors:
                f.write(_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                        + struct.pack("<IQ", tid, off))
                off = _pad(off + len(data))
            f.write(b"\0" * (_pad(f.tell()) - f.tell()))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (_pad(len(data)) - len(data)))
