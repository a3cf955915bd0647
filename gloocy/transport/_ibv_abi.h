/* The part of the libibverbs ABI gloocy uses, declared here so that gloocy
 * builds without rdma-core and loads libibverbs.so.1 at run time (dlopen),
 * as NCCL's ibvwrap does. Only the stable, versioned ABI (IBVERBS_1.1) is
 * used: plain functions found with dlsym, and the four data-path verbs that
 * verbs.h inlines through context->ops (post_send, post_recv, poll_cq,
 * req_notify_cq). Every struct mirrors the real one field by field;
 * tests/unit/test_ibverbs_abi.py compiles static asserts of every offset and
 * size against the system's <infiniband/verbs.h> when it is installed.
 */
#ifndef GLOOCY_IBV_ABI_H
#define GLOOCY_IBV_ABI_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct glv_device;
struct glv_pd;
struct glv_srq;
struct glv_ah;

struct glv_sge { uint64_t addr; uint32_t length; uint32_t lkey; };

struct glv_send_wr {
    uint64_t wr_id;
    struct glv_send_wr *next;
    struct glv_sge *sg_list;
    int num_sge;
    int opcode;                    /* enum ibv_wr_opcode */
    unsigned int send_flags;
    uint32_t imm_data;             /* network byte order */
    union {
        struct { uint64_t remote_addr; uint32_t rkey; } rdma;
        struct { uint64_t remote_addr, compare_add, swap; uint32_t rkey; } atomic;
    } wr;
    union { struct { uint32_t remote_srqn; } xrc; } qp_type;
    union {                        /* bind_mw / tso: unused, sized as in verbs.h */
        struct { void *mw; uint32_t rkey; struct { void *mr; uint64_t addr, length;
                 unsigned int mw_access_flags; } bind_info; } bind_mw;
        struct { void *hdr; uint16_t hdr_sz, mss; } tso;
    } tail;
};

struct glv_recv_wr {
    uint64_t wr_id;
    struct glv_recv_wr *next;
    struct glv_sge *sg_list;
    int num_sge;
};

struct glv_wc {
    uint64_t wr_id;
    int status;                    /* enum ibv_wc_status */
    int opcode;                    /* enum ibv_wc_opcode */
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t imm_data;             /* network byte order */
    uint32_t qp_num;
    uint32_t src_qp;
    unsigned int wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
};

struct glv_qp;
struct glv_cq;

/* struct ibv_context_ops: the slots verbs.h's inline functions call. */
struct glv_context_ops {
    void *compat_0_10[11];         /* _compat_query_device .. _compat_create_cq */
    int (*poll_cq)(struct glv_cq *cq, int num_entries, struct glv_wc *wc);
    int (*req_notify_cq)(struct glv_cq *cq, int solicited_only);
    void *compat_13_24[12];        /* _compat_cq_event .. _compat_destroy_qp */
    int (*post_send)(struct glv_qp *qp, struct glv_send_wr *wr, struct glv_send_wr **bad);
    int (*post_recv)(struct glv_qp *qp, struct glv_recv_wr *wr, struct glv_recv_wr **bad);
    void *compat_27_31[5];         /* _compat_create_ah .. _compat_async_event */
};

struct glv_context {
    struct glv_device *device;
    struct glv_context_ops ops;
    int cmd_fd;
    int async_fd;
    int num_comp_vectors;
    /* pthread_mutex_t mutex; void *abi_compat; (not used) */
};

struct glv_comp_channel { struct glv_context *context; int fd; int refcnt; };

struct glv_cq {
    struct glv_context *context;
    struct glv_comp_channel *channel;
    void *cq_context;
    uint32_t handle;
    int cqe;
};

struct glv_mr {
    struct glv_context *context;
    struct glv_pd *pd;
    void *addr;
    size_t length;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
};

struct glv_qp {
    struct glv_context *context;
    void *qp_context;
    struct glv_pd *pd;
    struct glv_cq *send_cq;
    struct glv_cq *recv_cq;
    struct glv_srq *srq;
    uint32_t handle;
    uint32_t qp_num;
    int state;
    int qp_type;
};

struct glv_qp_cap {
    uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

struct glv_qp_init_attr {
    void *qp_context;
    struct glv_cq *send_cq;
    struct glv_cq *recv_cq;
    struct glv_srq *srq;
    struct glv_qp_cap cap;
    int qp_type;
    int sq_sig_all;
};

union glv_gid { uint8_t raw[16]; struct { uint64_t subnet_prefix, interface_id; } global; };

struct glv_global_route {
    union glv_gid dgid;
    uint32_t flow_label;
    uint8_t sgid_index, hop_limit, traffic_class;
};

struct glv_ah_attr {
    struct glv_global_route grh;
    uint16_t dlid;
    uint8_t sl, src_path_bits, static_rate, is_global, port_num;
};

struct glv_qp_attr {
    int qp_state, cur_qp_state, path_mtu, path_mig_state;
    uint32_t qkey, rq_psn, sq_psn, dest_qp_num;
    unsigned int qp_access_flags;
    struct glv_qp_cap cap;
    struct glv_ah_attr ah_attr;
    struct glv_ah_attr alt_ah_attr;
    uint16_t pkey_index, alt_pkey_index;
    uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic;
    uint8_t min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry;
    uint8_t alt_port_num, alt_timeout;
    uint32_t rate_limit;
};

/* struct ibv_port_attr (the exported ibv_query_port fills its older,
 * shorter form: the reserve keeps any library version inside bounds). */
struct glv_port_attr {
    int state, max_mtu, active_mtu, gid_tbl_len;
    uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr;
    uint16_t pkey_tbl_len, lid, sm_lid;
    uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply;
    uint8_t active_width, active_speed, phys_state, link_layer, flags;
    uint16_t port_cap_flags2;
    uint8_t reserve[64];
};

union glv_async_element { struct glv_cq *cq; struct glv_qp *qp; void *srq; void *wq; int port_num; };
struct glv_async_event {
    union glv_async_element element;
    int event_type;                /* enum ibv_event_type */
};

/* The verbs' enum values (the ABI: the same in every rdma-core). */
enum {
    GLV_QPT_RC = 2,
    GLV_QPS_RESET = 0, GLV_QPS_INIT, GLV_QPS_RTR, GLV_QPS_RTS, GLV_QPS_SQD,
    GLV_QPS_SQE, GLV_QPS_ERR,
    GLV_MTU_256 = 1, GLV_MTU_4096 = 5,
    GLV_PORT_ACTIVE = 4,
    GLV_LINK_LAYER_ETHERNET = 2,
    GLV_ACCESS_LOCAL_WRITE = 1, GLV_ACCESS_REMOTE_WRITE = 2, GLV_ACCESS_REMOTE_READ = 4,
    GLV_QP_STATE = 1 << 0, GLV_QP_ACCESS_FLAGS = 1 << 3, GLV_QP_PKEY_INDEX = 1 << 4,
    GLV_QP_PORT = 1 << 5, GLV_QP_AV = 1 << 7, GLV_QP_PATH_MTU = 1 << 8,
    GLV_QP_TIMEOUT = 1 << 9, GLV_QP_RETRY_CNT = 1 << 10, GLV_QP_RNR_RETRY = 1 << 11,
    GLV_QP_RQ_PSN = 1 << 12, GLV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
    GLV_QP_MIN_RNR_TIMER = 1 << 15, GLV_QP_SQ_PSN = 1 << 16,
    GLV_QP_MAX_DEST_RD_ATOMIC = 1 << 17, GLV_QP_DEST_QPN = 1 << 20,
    GLV_WR_RDMA_WRITE = 0, GLV_WR_RDMA_WRITE_WITH_IMM = 1, GLV_WR_SEND = 2,
    GLV_WR_SEND_WITH_IMM = 3, GLV_WR_RDMA_READ = 4,
    GLV_SEND_SIGNALED = 2,
    GLV_WC_SUCCESS = 0, GLV_WC_LOC_LEN_ERR = 1, GLV_WC_LOC_PROT_ERR = 4,
    GLV_WC_WR_FLUSH_ERR = 5, GLV_WC_REM_INV_REQ_ERR = 9, GLV_WC_REM_ACCESS_ERR = 10,
    GLV_WC_RETRY_EXC_ERR = 12, GLV_WC_RNR_RETRY_EXC_ERR = 13,
    GLV_WC_SEND = 0, GLV_WC_RDMA_WRITE = 1, GLV_WC_RDMA_READ = 2,
    GLV_WC_RECV = 128, GLV_WC_RECV_RDMA_WITH_IMM = 129,
    GLV_WC_WITH_IMM = 2,
};

/* The functions, found in libibverbs.so.1 by glv_load(). */
struct glv_api {
    struct glv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct glv_device **list);
    const char *(*get_device_name)(struct glv_device *dev);
    struct glv_context *(*open_device)(struct glv_device *dev);
    int (*close_device)(struct glv_context *ctx);
    int (*query_port)(struct glv_context *ctx, uint8_t port, struct glv_port_attr *attr);
    int (*query_gid)(struct glv_context *ctx, uint8_t port, int index, union glv_gid *gid);
    struct glv_pd *(*alloc_pd)(struct glv_context *ctx);
    int (*dealloc_pd)(struct glv_pd *pd);
    struct glv_mr *(*reg_mr)(struct glv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct glv_mr *mr);
    struct glv_comp_channel *(*create_comp_channel)(struct glv_context *ctx);
    int (*destroy_comp_channel)(struct glv_comp_channel *ch);
    struct glv_cq *(*create_cq)(struct glv_context *ctx, int cqe, void *cq_context,
                                struct glv_comp_channel *ch, int comp_vector);
    int (*destroy_cq)(struct glv_cq *cq);
    int (*get_cq_event)(struct glv_comp_channel *ch, struct glv_cq **cq, void **ctx);
    void (*ack_cq_events)(struct glv_cq *cq, unsigned int n);
    int (*get_async_event)(struct glv_context *ctx, struct glv_async_event *ev);
    void (*ack_async_event)(struct glv_async_event *ev);
    struct glv_qp *(*create_qp)(struct glv_pd *pd, struct glv_qp_init_attr *attr);
    int (*destroy_qp)(struct glv_qp *qp);
    int (*modify_qp)(struct glv_qp *qp, struct glv_qp_attr *attr, int mask);
};

static struct glv_api glv;
static void *glv_handle;
static char glv_error[512];

/* Open `path` (libibverbs.so.1) and find every function: 0, or -1 with
 * glv_error saying what is missing. Idempotent once it succeeded. */
static int glv_load(const char *path) {
    static const char *const names[] = {
        "ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name",
        "ibv_open_device", "ibv_close_device", "ibv_query_port", "ibv_query_gid",
        "ibv_alloc_pd", "ibv_dealloc_pd", "ibv_reg_mr", "ibv_dereg_mr",
        "ibv_create_comp_channel", "ibv_destroy_comp_channel", "ibv_create_cq",
        "ibv_destroy_cq", "ibv_get_cq_event", "ibv_ack_cq_events",
        "ibv_get_async_event", "ibv_ack_async_event", "ibv_create_qp",
        "ibv_destroy_qp", "ibv_modify_qp",
    };
    void **slot = (void **)&glv;
    size_t i;
    void *h;
    if (glv_handle) return 0;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(glv_error, sizeof(glv_error), "cannot load %s (%s)", path, dlerror());
        return -1;
    }
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        /* the default version (IBVERBS_1.1), as a program linked today gets */
        void *f = dlvsym(h, names[i], "IBVERBS_1.1");
        if (!f) f = dlsym(h, names[i]);
        if (!f) {
            snprintf(glv_error, sizeof(glv_error), "%s has no %s", path, names[i]);
            dlclose(h);
            return -1;
        }
        slot[i] = f;
    }
    glv_handle = h;
    return 0;
}

#endif
