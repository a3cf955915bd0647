# The verbs ABI gloocy uses (declared in _ibv_abi.h; checked against the
# real <infiniband/verbs.h> by tests/unit/test_ibverbs_abi.py), for Cython.
# The function pointers are called without the GIL.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "_ibv_abi.h" nogil:
    struct glv_device:
        pass
    struct glv_pd:
        pass
    struct glv_sge:
        uint64_t addr
        uint32_t length
        uint32_t lkey
    struct glv_send_wr:
        uint64_t wr_id
        glv_send_wr *next
        glv_sge *sg_list
        int num_sge
        int opcode
        unsigned int send_flags
        uint32_t imm_data
    struct glv_recv_wr:
        uint64_t wr_id
        glv_recv_wr *next
        glv_sge *sg_list
        int num_sge
    struct glv_wc:
        uint64_t wr_id
        int status
        int opcode
        uint32_t vendor_err
        uint32_t byte_len
        uint32_t imm_data
        uint32_t qp_num
    struct glv_cq
    struct glv_qp
    struct glv_context_ops:
        int (*poll_cq)(glv_cq *cq, int n, glv_wc *wc) noexcept nogil
        int (*req_notify_cq)(glv_cq *cq, int solicited_only) noexcept nogil
        int (*post_send)(glv_qp *qp, glv_send_wr *wr, glv_send_wr **bad) noexcept nogil
        int (*post_recv)(glv_qp *qp, glv_recv_wr *wr, glv_recv_wr **bad) noexcept nogil
    struct glv_context:
        glv_context_ops ops
        int async_fd
    struct glv_comp_channel:
        int fd
    struct glv_cq:
        glv_context *context
    struct glv_mr:
        void *addr
        size_t length
        uint32_t lkey
        uint32_t rkey
    struct glv_qp:
        glv_context *context
        uint32_t qp_num
    struct glv_qp_cap:
        uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
    struct glv_qp_init_attr:
        void *qp_context
        glv_cq *send_cq
        glv_cq *recv_cq
        glv_qp_cap cap
        int qp_type
        int sq_sig_all
    union glv_gid:
        uint8_t raw[16]
    struct glv_global_route:
        glv_gid dgid
        uint32_t flow_label
        uint8_t sgid_index, hop_limit, traffic_class
    struct glv_ah_attr:
        glv_global_route grh
        uint16_t dlid
        uint8_t sl, src_path_bits, static_rate, is_global, port_num
    struct glv_qp_attr:
        int qp_state, path_mtu
        uint32_t rq_psn, sq_psn, dest_qp_num
        unsigned int qp_access_flags
        glv_ah_attr ah_attr
        uint16_t pkey_index
        uint8_t max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num
        uint8_t timeout, retry_cnt, rnr_retry
    struct glv_port_attr:
        int state, active_mtu, gid_tbl_len
        uint16_t lid
        uint8_t link_layer
    union glv_async_element:
        glv_qp *qp
    struct glv_async_event:
        glv_async_element element
        int event_type
    struct glv_api:
        glv_device **(*get_device_list)(int *num) noexcept nogil
        void (*free_device_list)(glv_device **lst) noexcept nogil
        const char *(*get_device_name)(glv_device *dev) noexcept nogil
        glv_context *(*open_device)(glv_device *dev) noexcept nogil
        int (*close_device)(glv_context *ctx) noexcept nogil
        int (*query_port)(glv_context *ctx, uint8_t port, glv_port_attr *attr) noexcept nogil
        int (*query_gid)(glv_context *ctx, uint8_t port, int index, glv_gid *gid) noexcept nogil
        glv_pd *(*alloc_pd)(glv_context *ctx) noexcept nogil
        int (*dealloc_pd)(glv_pd *pd) noexcept nogil
        glv_mr *(*reg_mr)(glv_pd *pd, void *addr, size_t length, int access) noexcept nogil
        int (*dereg_mr)(glv_mr *mr) noexcept nogil
        glv_comp_channel *(*create_comp_channel)(glv_context *ctx) noexcept nogil
        int (*destroy_comp_channel)(glv_comp_channel *ch) noexcept nogil
        glv_cq *(*create_cq)(glv_context *ctx, int cqe, void *cq_ctx,
                             glv_comp_channel *ch, int vec) noexcept nogil
        int (*destroy_cq)(glv_cq *cq) noexcept nogil
        int (*get_cq_event)(glv_comp_channel *ch, glv_cq **cq, void **ctx) noexcept nogil
        void (*ack_cq_events)(glv_cq *cq, unsigned int n) noexcept nogil
        int (*get_async_event)(glv_context *ctx, glv_async_event *ev) noexcept nogil
        void (*ack_async_event)(glv_async_event *ev) noexcept nogil
        glv_qp *(*create_qp)(glv_pd *pd, glv_qp_init_attr *attr) noexcept nogil
        int (*destroy_qp)(glv_qp *qp) noexcept nogil
        int (*modify_qp)(glv_qp *qp, glv_qp_attr *attr, int mask) noexcept nogil
    glv_api glv
    char glv_error[512]
    int glv_load(const char *path)
    enum:
        GLV_QPT_RC, GLV_QPS_INIT, GLV_QPS_RTR, GLV_QPS_RTS, GLV_QPS_ERR
        GLV_MTU_256, GLV_MTU_4096, GLV_PORT_ACTIVE, GLV_LINK_LAYER_ETHERNET
        GLV_ACCESS_LOCAL_WRITE, GLV_ACCESS_REMOTE_WRITE, GLV_ACCESS_REMOTE_READ
        GLV_QP_STATE, GLV_QP_ACCESS_FLAGS, GLV_QP_PKEY_INDEX, GLV_QP_PORT
        GLV_QP_AV, GLV_QP_PATH_MTU, GLV_QP_TIMEOUT, GLV_QP_RETRY_CNT
        GLV_QP_RNR_RETRY, GLV_QP_RQ_PSN, GLV_QP_MAX_QP_RD_ATOMIC
        GLV_QP_MIN_RNR_TIMER, GLV_QP_SQ_PSN, GLV_QP_MAX_DEST_RD_ATOMIC
        GLV_QP_DEST_QPN
        GLV_WR_SEND_WITH_IMM, GLV_WR_RDMA_READ, GLV_SEND_SIGNALED
        GLV_WC_SUCCESS, GLV_WC_WR_FLUSH_ERR, GLV_WC_RETRY_EXC_ERR
        GLV_WC_RNR_RETRY_EXC_ERR
