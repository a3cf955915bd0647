/* A user-space stand-in for libibverbs.so.1, for gloocy's tests.
 *
 * It implements the verbs gloocy uses (device list and query, PDs, MRs, CQs
 * with a completion channel, RC QPs, post_send/post_recv/poll_cq/
 * req_notify_cq through ctx->ops, as the inline functions of verbs.h call
 * them) between processes of one machine. Each process runs one helper
 * thread that serves its QPs over Unix sockets in GLOOCY_IBMOCK_DIR: a QP in
 * RTR connects to its destination QP's process (the QP number holds the
 * pid); the connection from A to B carries A's requests and B's responses.
 * The requester copies what it sends at post time; the responder checks
 * rkeys, bounds and access flags in its own MR table and answers with a
 * status, which the requester turns into a work completion, as an HCA does.
 *
 * Faults (environment): GLOOCY_IBMOCK_MAX_MR (registration limit: how
 * many), GLOOCY_IBMOCK_MAX_MR_BYTES (how many bytes, in whole pages, as
 * the locked-memory limit bounds pinned memory; ibv_reg_mr then fails
 * with ENOMEM),
 * GLOOCY_IBMOCK_DELAY_US (each response delayed; _READ_DELAY_US: RDMA
 * read responses only), GLOOCY_IBMOCK_QP_ERROR_AFTER
 * (a QP is forced into the error state after that many sends in this
 * process, with an IBV_EVENT_QP_FATAL async event), GLOOCY_IBMOCK_PORT_DOWN,
 * GLOOCY_IBMOCK_PORT_ERR_FILE (the port goes down once that file exists:
 * an IBV_EVENT_PORT_ERR async event, and nothing reaches the peers after
 * it),
 * GLOOCY_IBMOCK_BAD_RKEY (RDMA requests carry a wrong rkey);
 * GLOOCY_IBMOCK_LINK_LAYER=ethernet makes the port a RoCE one (no LID: a QP
 * in RTR must be given a global route with a GID of index < 4).
 * An MR used after its memory was unmapped and mapped again fails as a
 * protection error (see same_pages in ibmock_serve.c).
 * A peer process that dies gives IBV_WC_RETRY_EXC_ERR after the QP's
 * retry time (timeout and retry_cnt, capped at GLOOCY_IBMOCK_RETRY_MS).
 */
#define _GNU_SOURCE
#include "ibmock.h"

/* -- the verbs ----------------------------------------------------------- */

EXPORT struct ibv_device **ibv_get_device_list(int *num) {
    const char *name = getenv("GLOOCY_IBMOCK_DEVICE");
    memset(&dev0, 0, sizeof(dev0));
    snprintf(dev0.name, sizeof(dev0.name), "%s", name ? name : "mock0");
    snprintf(dev0.dev_name, sizeof(dev0.dev_name), "uverbs0");
    dev0.node_type = IBV_NODE_CA;
    dev0.transport_type = IBV_TRANSPORT_IB;
    devlist[0] = &dev0; devlist[1] = NULL;
    if (num) *num = 1;
    return devlist;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { (void)list; }

EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

static int m_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    struct mcq *c = (struct mcq *)cq;
    int got = 0;
    pthread_mutex_lock(&G);
    while (got < n && c->h) {
        struct cqe_node *e = c->h;
        wc[got++] = e->wc;
        c->h = e->next;
        if (!c->h) c->t = NULL;
        free(e);
    }
    pthread_mutex_unlock(&G);
    return got;
}

static int m_req_notify_cq(struct ibv_cq *cq, int solicited) {
    (void)solicited;
    pthread_mutex_lock(&G);
    ((struct mcq *)cq)->armed = 1;
    pthread_mutex_unlock(&G);
    return 0;
}

static int check_sges(const struct ibv_sge *s, int n, int access) {
    int i;
    for (i = 0; i < n; i++)
        if (s[i].length && !mr_allows(s[i].lkey, s[i].addr, s[i].length, access)) return 0;
    return 1;
}

static int m_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    struct mqp *q = (struct mqp *)qp;
    int rc = 0;
    pthread_mutex_lock(&G);
    for (; wr; wr = wr->next) {
        struct wrq *w;
        struct msg m;
        int i, read = wr->opcode == IBV_WR_RDMA_READ;
        if (q->attr.qp_state != IBV_QPS_RTS && q->attr.qp_state != IBV_QPS_ERR) { rc = EINVAL; break; }
        if (wr->num_sge < 0 || wr->num_sge > 4 ||
            (int)q->attr.cap.max_send_wr <= 0) { rc = EINVAL; break; }
        if (!(w = calloc(1, sizeof(*w)))) { rc = ENOMEM; break; }
        w->wr_id = wr->wr_id; w->opcode = wr->opcode; w->nsge = wr->num_sge;
        w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->forced;
        for (i = 0; i < wr->num_sge; i++) { w->sge[i] = wr->sg_list[i]; w->len += wr->sg_list[i].length; }
        if (q->attr.qp_state == IBV_QPS_ERR) {
            complete(q, qp->send_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(w->opcode), 0, 1, 0, 0);
            free(w);
            continue;
        }
        if (!check_sges(w->sge, w->nsge, read ? IBV_ACCESS_LOCAL_WRITE : 0)) {
            complete(q, qp->send_cq, w->wr_id, IBV_WC_LOC_PROT_ERR, wc_opcode(w->opcode), 0, 1, 0, 0);
            free(w);
            qp_fail(q, IBV_WC_WR_FLUSH_ERR);
            continue;
        }
        memset(&m, 0, sizeof(m));
        m.opcode = wr->opcode;
        m.imm = wr->imm_data;
        m.rnr_retry = q->attr.rnr_retry;
        switch (wr->opcode) {
        case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: m.type = REQ_SEND; break;
        case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: m.type = REQ_WRITE; break;
        case IBV_WR_RDMA_READ: m.type = REQ_READ; break;
        default: free(w); rc = EINVAL; goto out;
        }
        if (m.type != REQ_SEND) {
            m.raddr = wr->wr.rdma.remote_addr;
            m.rkey = wr->wr.rdma.rkey ^ (bad_rkey ? 0x5a5a00u : 0);   /* fault: a wrong key */
        }
        if (read) m.rlen = w->len; else m.len = w->len;
        if (q->sq_t) q->sq_t->next = w; else q->sq_h = w;
        q->sq_t = w;
        enqueue(q->out, &m, NULL, read ? NULL : w->sge, read ? 0 : w->nsge);
        if (qp_error_after && ++sends_posted >= qp_error_after) {
            qp_fail(q, IBV_WC_WR_FLUSH_ERR);
            async_event(qp, IBV_EVENT_QP_FATAL);
        }
    }
out:
    if (rc && bad) *bad = wr;
    pthread_mutex_unlock(&G);
    wake();
    return rc;
}

static int m_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    struct mqp *q = (struct mqp *)qp;
    int rc = 0, i;
    pthread_mutex_lock(&G);
    for (; wr; wr = wr->next) {
        struct wrq *w;
        if (q->attr.qp_state == IBV_QPS_RESET || wr->num_sge < 0 || wr->num_sge > 4) { rc = EINVAL; break; }
        if (!(w = calloc(1, sizeof(*w)))) { rc = ENOMEM; break; }
        w->wr_id = wr->wr_id; w->nsge = wr->num_sge;
        for (i = 0; i < wr->num_sge; i++) w->sge[i] = wr->sg_list[i];
        if (q->attr.qp_state == IBV_QPS_ERR) {
            complete(q, qp->recv_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 1, 0, 0);
            free(w);
            continue;
        }
        if (!check_sges(w->sge, w->nsge, IBV_ACCESS_LOCAL_WRITE)) {
            complete(q, qp->recv_cq, w->wr_id, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, 1, 0, 0);
            free(w);
            qp_fail(q, IBV_WC_WR_FLUSH_ERR);
            continue;
        }
        if (q->rq_t) q->rq_t->next = w; else q->rq_h = w;
        q->rq_t = w;
    }
    if (rc && bad) *bad = wr;
    if (q->hq_h) serve_held(q);
    pthread_mutex_unlock(&G);
    wake();
    return rc;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d) {
    struct sockaddr_un a;
    const char *dir = getenv("GLOOCY_IBMOCK_DIR");
    struct ibv_context *c;
    pthread_mutex_lock(&G);
    if (opened) { pthread_mutex_unlock(&G); errno = EBUSY; return NULL; }
    c = calloc(1, sizeof(*c));
    c->device = d;
    c->ops.poll_cq = m_poll_cq;
    c->ops.req_notify_cq = m_req_notify_cq;
    c->ops.post_send = m_post_send;
    c->ops.post_recv = m_post_recv;
    c->num_comp_vectors = 1;
    c->cmd_fd = -1;
    snprintf(sock_dir, sizeof(sock_dir), "%s", dir ? dir : "/tmp");
    delay_us = getenv("GLOOCY_IBMOCK_DELAY_US") ? atol(getenv("GLOOCY_IBMOCK_DELAY_US")) : 0;
    qp_error_after = getenv("GLOOCY_IBMOCK_QP_ERROR_AFTER") ? atol(getenv("GLOOCY_IBMOCK_QP_ERROR_AFTER")) : 0;
    read_delay_us = getenv("GLOOCY_IBMOCK_READ_DELAY_US") ? atol(getenv("GLOOCY_IBMOCK_READ_DELAY_US")) : 0;
    bad_rkey = getenv("GLOOCY_IBMOCK_BAD_RKEY") ? atol(getenv("GLOOCY_IBMOCK_BAD_RKEY")) : 0;
    max_mr = getenv("GLOOCY_IBMOCK_MAX_MR") ? atoi(getenv("GLOOCY_IBMOCK_MAX_MR")) : MAX_MR_SLOTS - 1;
    port_err_file = getenv("GLOOCY_IBMOCK_PORT_ERR_FILE");
    port_failed = 0;
    max_mr_bytes = getenv("GLOOCY_IBMOCK_MAX_MR_BYTES") ? atoll(getenv("GLOOCY_IBMOCK_MAX_MR_BYTES")) : 0;
    if (pipe2(async_pipe, O_CLOEXEC) < 0) goto fail;
    c->async_fd = async_pipe[0];
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    sock_path(a.sun_path, sizeof(a.sun_path), getpid());
    unlink(a.sun_path);
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(listen_fd, 64) < 0)
        goto fail;
    stop = 0;
    if (pthread_create(&helper, NULL, serve_loop, NULL)) goto fail;
    opened = 1;
    ctx0 = c;
    pthread_mutex_unlock(&G);
    return c;
fail:
    pthread_mutex_unlock(&G);
    free(c);
    return NULL;
}

EXPORT int ibv_close_device(struct ibv_context *c) {
    char path[256];
    int i;
    pthread_mutex_lock(&G);
    stop = 1;
    pthread_mutex_unlock(&G);
    wake();
    pthread_join(helper, NULL);
    for (i = 0; i < MAX_QP; i++)
        if (loose[i]) { close(loose[i]->fd); free(loose[i]); loose[i] = NULL; }
    close(listen_fd); close(wake_fd);
    close(async_pipe[0]); close(async_pipe[1]);
    mr_pages_close();
    sock_path(path, sizeof(path), getpid());
    unlink(path);
    opened = 0;
    ctx0 = NULL;
    free(c);
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
    (void)c;
    memset(a, 0, sizeof(*a));
    a->max_qp = MAX_QP; a->max_qp_wr = 4096; a->max_sge = 4; a->max_cqe = 1 << 20;
    a->max_mr = max_mr; a->max_mr_size = ~0ull; a->phys_port_cnt = 1;
    a->max_qp_rd_atom = 16; a->max_qp_init_rd_atom = 16;
    return 0;
}

EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *compat) {
    struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
    (void)c;
    if (port != 1) return EINVAL;
    /* only the old (compat) part of the struct: callers pass that size */
    memset(a, 0, offsetof(struct ibv_port_attr, link_layer) + 1);
    a->state = getenv("GLOOCY_IBMOCK_PORT_DOWN") || port_failed ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a->max_mtu = a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 4;
    a->max_msg_sz = 1u << 31;
    if (roce()) {             /* RoCE: no LIDs, addresses are GIDs */
        a->lid = 0;
        a->link_layer = IBV_LINK_LAYER_ETHERNET;
    } else {
        a->lid = 1;
        a->link_layer = IBV_LINK_LAYER_INFINIBAND;
    }
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
    (void)c;
    if (port != 1 || index < 0 || index >= 4) return EINVAL;
    memset(gid, 0, sizeof(*gid));
    gid->raw[0] = 0xfe; gid->raw[1] = 0x80; gid->raw[15] = (uint8_t)index;
    return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd) pd->context = c;
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
    struct mmr *m;
    int i;
    pthread_mutex_lock(&G);
    if (n_mr >= max_mr) { pthread_mutex_unlock(&G); errno = ENOMEM; return NULL; }
    for (i = 1; i < MAX_MR_SLOTS && mrs[i]; i++) {}
    if (i == MAX_MR_SLOTS || !(m = calloc(1, sizeof(*m)))) {
        pthread_mutex_unlock(&G); errno = ENOMEM; return NULL;
    }
    m->mr.context = pd->context; m->mr.pd = pd; m->mr.addr = addr; m->mr.length = len;
    m->mr.lkey = ((uint32_t)i << 8) | (mr_gen++ & 0xff);
    m->mr.rkey = m->mr.lkey;
    m->access = access;
    m->live = 1;
    mr_pages(m);
    if (max_mr_bytes && mr_bytes + (long long)m->pinned > max_mr_bytes) {
        /* over the locked-memory limit: what pinning more pages gives */
        pthread_mutex_unlock(&G); free(m->pfn); free(m); errno = ENOMEM; return NULL;
    }
    mrs[i] = m;
    mr_bytes += m->pinned;
    n_mr++;
    pthread_mutex_unlock(&G);
    return &m->mr;
}

/* What verbs.h's ibv_reg_mr macro calls when it cannot tell at compile
 * time that the access flags are old ones (an unoptimised build). */
EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len,
                                       uint64_t iova, unsigned int access) {
    if (iova != (uint64_t)(uintptr_t)addr) { errno = EINVAL; return NULL; }
    return ibv_reg_mr(pd, addr, len, (int)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
    struct mmr *m = (struct mmr *)mr;
    pthread_mutex_lock(&G);
    mrs[mr->lkey >> 8] = NULL;
    n_mr--;
    mr_bytes -= m->pinned;
    pthread_mutex_unlock(&G);
    free(m->pfn);
    free(m);
    return 0;
}

static struct ibv_comp_channel *chans[MAX_QP];   /* for ibmock_held_fds */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
    struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
    int p[2], i;
    if (!ch || pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) { free(ch); return NULL; }
    ch->context = c;
    ch->fd = p[0];
    ch->refcnt = p[1];        /* the write end (the real library counts CQs here) */
    pthread_mutex_lock(&G);
    for (i = 0; i < MAX_QP && chans[i]; i++) {}
    if (i < MAX_QP) chans[i] = ch;
    pthread_mutex_unlock(&G);
    return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
    int i;
    pthread_mutex_lock(&G);
    for (i = 0; i < MAX_QP; i++)
        if (chans[i] == ch) chans[i] = NULL;
    pthread_mutex_unlock(&G);
    close(ch->fd); close(ch->refcnt);
    free(ch);
    return 0;
}

/* Not a verb: the fds the stand-in holds for its live objects (the device,
 * completion channels, QPs' connections, the pagemap), into out[0..max);
 * returns how many. Where a real HCA's objects live in the kernel, these
 * are the stand-in's: the tests' leak checks count them as the
 * connections' (tests/ibmock/__init__.py: held_fds). */
EXPORT int ibmock_held_fds(int *out, int max) {
    int n = 0, i;
#define PUT(fd) do { if ((fd) >= 0 && n < max) out[n++] = (fd); } while (0)
    pthread_mutex_lock(&G);
    if (opened) {
        PUT(async_pipe[0]); PUT(async_pipe[1]); PUT(wake_fd); PUT(listen_fd);
    }
    PUT(mr_pages_fd());
    for (i = 0; i < MAX_QP; i++) {
        if (qps[i] && qps[i]->out) PUT(qps[i]->out->fd);
        if (qps[i] && qps[i]->in) PUT(qps[i]->in->fd);
        if (loose[i]) PUT(loose[i]->fd);
        if (chans[i]) { PUT(chans[i]->fd); PUT(chans[i]->refcnt); }
    }
    pthread_mutex_unlock(&G);
#undef PUT
    return n;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx,
                                    struct ibv_comp_channel *ch, int vec) {
    struct mcq *q = calloc(1, sizeof(*q));
    (void)vec;
    if (!q) return NULL;
    q->cq.context = c; q->cq.channel = ch; q->cq.cq_context = ctx; q->cq.cqe = cqe;
    return &q->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
    struct mcq *c = (struct mcq *)cq;
    struct cqe_node *e;
    pthread_mutex_lock(&G);
    while ((e = c->h)) { c->h = e->next; free(e); }
    pthread_mutex_unlock(&G);
    free(c);
    return 0;
}

/* The channel's write end is in refcnt (see ibv_create_comp_channel). */
EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx) {
    struct ibv_cq *got;
    if (read(ch->fd, &got, sizeof(got)) != sizeof(got)) return -1;
    *cq = got;
    *ctx = got->cq_context;
    return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { (void)cq; (void)n; }

EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev) {
    return read(c->async_fd, ev, sizeof(*ev)) == sizeof(*ev) ? 0 : -1;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    struct mqp *q;
    int i;
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->srq) { errno = EINVAL; return NULL; }
    pthread_mutex_lock(&G);
    for (i = 1; i < MAX_QP && qps[i]; i++) {}
    if (i == MAX_QP || !(q = calloc(1, sizeof(*q)))) { pthread_mutex_unlock(&G); errno = ENOMEM; return NULL; }
    q->qp.context = pd->context; q->qp.qp_context = a->qp_context; q->qp.pd = pd;
    q->qp.send_cq = a->send_cq; q->qp.recv_cq = a->recv_cq;
    q->qp.qp_num = ((uint32_t)(getpid() & 0x3fffff) << 10) | (uint32_t)i;
    q->qp.qp_type = IBV_QPT_RC;
    q->qp.state = IBV_QPS_RESET;
    q->attr.cap = a->cap;
    q->forced = a->sq_sig_all;
    qps[i] = q;
    pthread_mutex_unlock(&G);
    return &q->qp;
}

static void free_conn(struct conn *c) {
    if (!c) return;
    kill_conn(c);
    close(c->fd);
    free(c->body);
    free(c);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&G);
    qp_fail(q, IBV_WC_WR_FLUSH_ERR);
    qps[qp->qp_num & (MAX_QP - 1)] = NULL;
    free_conn(q->out);
    free_conn(q->in);
    pthread_mutex_unlock(&G);
    free(q);
    return 0;
}

#define NEED(mask, bits) (((mask) & (bits)) == (bits))

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
    struct mqp *q = (struct mqp *)qp;
    int from = q->attr.qp_state, to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from;
    int ok, rc = 0;
    pthread_mutex_lock(&G);
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) ok = 1;
    else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
        ok = NEED(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
             && a->port_num == 1;
    else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR)
        ok = NEED(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
             && a->path_mtu >= IBV_MTU_256 && a->path_mtu <= IBV_MTU_4096
             && (roce() ? a->ah_attr.is_global && a->ah_attr.grh.sgid_index < 4
                          && a->ah_attr.grh.dgid.raw[0] == 0xfe
                        : a->ah_attr.dlid != 0);
    else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
        ok = NEED(mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    else ok = 0;
    if (!ok) { pthread_mutex_unlock(&G); return EINVAL; }
#define TAKE(bit, field) if (mask & bit) q->attr.field = a->field
    TAKE(IBV_QP_ACCESS_FLAGS, qp_access_flags);
    TAKE(IBV_QP_PORT, port_num);
    TAKE(IBV_QP_PATH_MTU, path_mtu);
    TAKE(IBV_QP_DEST_QPN, dest_qp_num);
    TAKE(IBV_QP_RQ_PSN, rq_psn);
    TAKE(IBV_QP_SQ_PSN, sq_psn);
    TAKE(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    TAKE(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
    TAKE(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
    TAKE(IBV_QP_TIMEOUT, timeout);
    TAKE(IBV_QP_RETRY_CNT, retry_cnt);
    TAKE(IBV_QP_RNR_RETRY, rnr_retry);
    TAKE(IBV_QP_AV, ah_attr);
#undef TAKE
    q->attr.qp_state = to;
    qp->state = to;
    if (to == IBV_QPS_ERR) qp_fail(q, IBV_WC_WR_FLUSH_ERR);
    if (to == IBV_QPS_RTS && !q->out) {
        /* connect to the destination QP's process; a failure is found as a
         * lost peer (retries exhausted) by the first send */
        struct sockaddr_un sa;
        struct msg m;
        struct conn *c = calloc(1, sizeof(*c));
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        sock_path(sa.sun_path, sizeof(sa.sun_path), (int)(q->attr.dest_qp_num >> 10));
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) c->dead = 1;
        else fcntl(c->fd, F_SETFL, O_NONBLOCK);
        memset(&m, 0, sizeof(m));
        m.type = HELLO; m.src_qpn = qp->qp_num; m.dst_qpn = q->attr.dest_qp_num;
        m.psn = q->attr.sq_psn;
        q->out = c;
        enqueue(c, &m, NULL, NULL, 0);
    }
    pthread_mutex_unlock(&G);
    wake();
    return rc;
}
