"""Static asserts of gloocy's verbs declarations (_ibv_abi.h) against the
real <infiniband/verbs.h>: every field gloocy declares sits at the same
offset, every struct has the same size, every enum value is the same."""

import re

from . import ABI_HEADER

# (our struct, the real one, fields compared; None: every field we declare)
STRUCTS = [
    ("glv_sge", "ibv_sge", None),
    ("glv_send_wr", "ibv_send_wr", ["wr_id", "next", "sg_list", "num_sge", "opcode",
                                     "send_flags", "imm_data", "wr.rdma.remote_addr",
                                     "wr.rdma.rkey", "qp_type"]),
    ("glv_recv_wr", "ibv_recv_wr", None),
    ("glv_wc", "ibv_wc", None),
    ("glv_context_ops", "ibv_context_ops", ["poll_cq", "req_notify_cq", "post_send",
                                             "post_recv"]),
    ("glv_comp_channel", "ibv_comp_channel", None),
    ("glv_cq", "ibv_cq", ["context", "channel", "cq_context", "handle", "cqe"]),
    ("glv_mr", "ibv_mr", None),
    ("glv_qp", "ibv_qp", ["context", "qp_context", "pd", "send_cq", "recv_cq", "srq",
                          "handle", "qp_num", "state", "qp_type"]),
    ("glv_qp_cap", "ibv_qp_cap", None),
    ("glv_qp_init_attr", "ibv_qp_init_attr", None),
    ("glv_global_route", "ibv_global_route", None),
    ("glv_ah_attr", "ibv_ah_attr", None),
    ("glv_qp_attr", "ibv_qp_attr", None),
    ("glv_async_event", "ibv_async_event", ["element", "event_type"]),
]
# structs whose size must match too (gloocy allocates them)
SIZED = {"glv_sge", "glv_send_wr", "glv_recv_wr", "glv_wc", "glv_context_ops",
         "glv_qp_cap", "glv_qp_init_attr", "glv_global_route", "glv_ah_attr",
         "glv_qp_attr", "glv_async_event"}
PORT_FIELDS = ["state", "max_mtu", "active_mtu", "gid_tbl_len", "port_cap_flags",
               "max_msg_sz", "pkey_tbl_len", "lid", "sm_lid", "link_layer",
               "port_cap_flags2"]


def _fields(struct, text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    start = text.index("{", re.search(r"(struct|union) %s \{" % struct, text).start())
    depth, end = 0, start
    for end in range(start, len(text)):          # the brace-balanced body
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            break
    body = text[start + 1:end]
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl or "{" in decl or "}" in decl:
            continue
        if "(" in decl:                      # a function pointer
            names.append(re.search(r"\(\*(\w+)\)", decl).group(1))
            continue
        for part in decl.split(","):
            name = re.sub(r"\[.*\]", "", part).strip().split()[-1].lstrip("*")
            if not name.startswith(("compat_", "reserve")):
                names.append(name)
    return names


def source():
    text = ABI_HEADER.read_text()
    lines = ["#define _GNU_SOURCE", "#include <stddef.h>", "#include <infiniband/verbs.h>",
             f'#include "{ABI_HEADER}"']
    for ours, real, fields in STRUCTS:
        for f in fields or _fields(ours, text):
            lines.append(f"_Static_assert(offsetof(struct {ours}, {f}) == "
                         f"offsetof(struct {real}, {f}), \"{real}.{f}\");")
        if ours in SIZED:
            lines.append(f"_Static_assert(sizeof(struct {ours}) == sizeof(struct {real}),"
                         f" \"sizeof {real}\");")
    for f in PORT_FIELDS:
        lines.append(f"_Static_assert(offsetof(struct glv_port_attr, {f}) == "
                     f"offsetof(struct ibv_port_attr, {f}), \"ibv_port_attr.{f}\");")
    lines.append("_Static_assert(sizeof(struct glv_port_attr) >= sizeof(struct ibv_port_attr),"
                 " \"port attr reserve\");")
    lines.append("_Static_assert(sizeof(union glv_gid) == sizeof(union ibv_gid), \"gid\");")
    for name in re.findall(r"\b(GLV_\w+)\s*=", text):
        lines.append(f"_Static_assert((int){name} == (int)IBV_{name[4:]}, \"{name}\");")
    return "\n".join(lines) + "\n"
