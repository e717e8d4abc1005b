"""python/invar_bridge/_abi.py — kernels/invar_plugin.h and the argument structs of kernels/ops.h,
as ctypes declares them. Field for field; INVAR_PLUGIN_ABI_VERSION says which header they copy."""
import ctypes as C

ABI_VERSION = 1  # INVAR_PLUGIN_ABI_VERSION

# enum invar_plugin_op, in ops.h's order
OPS = ["embedding", "rmsnorm", "gemm", "rope", "residual_add", "silu_mul", "kv_cache_write",
       "mla_attention", "mha_prefill", "merge_attention", "moe_route", "moe_experts",
       "moe_combine", "logprobs"]


def op_bit(name):
    return 1 << OPS.index(name)


class Call(C.Structure):
    pass


FailFn = C.CFUNCTYPE(None, C.POINTER(Call), C.c_char_p)
Call._fields_ = [
    ("state", C.c_void_p),
    ("rank", C.c_int),
    ("device", C.c_int),
    ("stream", C.c_void_p),
    ("fail", FailFn),
]


class GemmArgs(C.Structure):
    _fields_ = [
        ("y", C.c_void_p), ("y_f32", C.c_bool), ("x", C.c_void_p), ("w", C.c_void_p),
        ("M", C.c_int), ("N", C.c_int), ("K", C.c_int),
        ("ldx", C.c_long), ("ldy", C.c_long), ("ldw", C.c_long),
        ("batch", C.c_int),
        ("stride_x", C.c_long), ("stride_y", C.c_long), ("stride_w", C.c_long),
        ("split_N", C.c_int),
    ]


class MhaPrefillArgs(C.Structure):
    _fields_ = [
        ("out", C.c_void_p), ("lse", C.c_void_p), ("q", C.c_void_p), ("kv", C.c_void_p),
        ("k_pe", C.c_void_p), ("key_begin", C.c_void_p), ("key_end", C.c_void_p),
        ("T", C.c_int), ("H", C.c_int), ("nope", C.c_int), ("R", C.c_int), ("v", C.c_int),
        ("ld_out", C.c_long), ("ld_q", C.c_long), ("ld_kv", C.c_long), ("ld_k_pe", C.c_long),
        ("scale", C.c_float),
    ]


class LogprobsArgs(C.Structure):
    _fields_ = [
        ("logits", C.c_void_p), ("R", C.c_int), ("V", C.c_int), ("k", C.c_int),
        ("temperature", C.c_void_p), ("noise_seed", C.c_void_p), ("position", C.c_void_p),
        ("token", C.c_void_p), ("token_logprob", C.c_void_p), ("topk_ids", C.c_void_p),
        ("topk_logprobs", C.c_void_p),
    ]


CallP = C.POINTER(Call)
EmbeddingFn = C.CFUNCTYPE(None, CallP, C.c_void_p, C.c_void_p, C.c_void_p, C.c_int, C.c_int)
RmsnormFn = C.CFUNCTYPE(None, CallP, C.c_void_p, C.c_long, C.c_void_p, C.c_long, C.c_void_p,
                        C.c_int, C.c_int, C.c_float)
GemmFn = C.CFUNCTYPE(None, CallP, C.POINTER(GemmArgs))
MhaPrefillFn = C.CFUNCTYPE(None, CallP, C.POINTER(MhaPrefillArgs))
LogprobsFn = C.CFUNCTYPE(None, CallP, C.POINTER(LogprobsArgs))
# The ops the bridge does not adapt yet keep NULL pointers of the right width.
_Opaque = C.c_void_p


class Plugin(C.Structure):
    _fields_ = [
        ("abi_version", C.c_uint32),
        ("name", C.c_char_p),
        ("device", C.c_char_p),
        ("invariant_claims", C.c_uint64),
        ("create", _Opaque),
        ("destroy", _Opaque),
        ("embedding", EmbeddingFn),
        ("rmsnorm", RmsnormFn),
        ("gemm", GemmFn),
        ("rope", _Opaque),
        ("residual_add", _Opaque),
        ("silu_mul", _Opaque),
        ("kv_cache_write", _Opaque),
        ("mla_attention", _Opaque),
        ("mha_prefill", MhaPrefillFn),
        ("merge_attention", _Opaque),
        ("moe_route", _Opaque),
        ("moe_experts", _Opaque),
        ("moe_combine", _Opaque),
        ("logprobs", LogprobsFn),
    ]
