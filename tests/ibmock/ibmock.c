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
 * Faults (environment): GLOOCY_IBMOCK_MAX_MR (registration limit),
 * GLOOCY_IBMOCK_DELAY_US (each response delayed; _READ_DELAY_US: RDMA
 * read responses only), GLOOCY_IBMOCK_QP_ERROR_AFTER
 * (a QP is forced into the error state after that many sends in this
 * process, with an IBV_EVENT_QP_FATAL async event), GLOOCY_IBMOCK_PORT_DOWN,
 * GLOOCY_IBMOCK_BAD_RKEY (RDMA requests carry a wrong rkey);
 * GLOOCY_IBMOCK_LINK_LAYER=ethernet makes the port a RoCE one (no LID: a QP
 * in RTR must be given a global route with a GID of index < 4).
 * A peer process that dies gives IBV_WC_RETRY_EXC_ERR after the QP's
 * retry time (timeout and retry_cnt, capped at GLOOCY_IBMOCK_RETRY_MS).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#undef ibv_reg_mr
#undef ibv_query_port
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_QP 1024
#define MAX_MR_SLOTS 65536
#define EXPORT __attribute__((visibility("default")))

enum { REQ_SEND = 1, REQ_WRITE, REQ_READ, RESP, HELLO };

struct msg {                 /* on the wire, then `len` bytes of body */
    uint32_t type, len;      /* len: body bytes */
    uint32_t opcode;         /* the ibv_wr_opcode of a request */
    uint32_t status;         /* RESP: the requester's ibv_wc_status */
    uint64_t raddr;
    uint32_t rkey, imm;
    uint32_t rlen;           /* REQ_READ: bytes wanted */
    uint32_t src_qpn, dst_qpn, psn;   /* HELLO */
    uint32_t rnr_retry, pad;
};

struct out {                 /* a message waiting to be written */
    struct out *next;
    size_t size, done;
    char data[];
};

struct conn {                /* one socket end */
    int fd;
    struct out *oh, *ot;
    struct msg in;           /* message being read */
    size_t in_got;
    char *body;
    int dead;
    uint32_t src_qpn, psn;   /* from the HELLO of an incoming connection */
};

struct wrq {                 /* a posted send or receive */
    struct wrq *next;
    uint64_t wr_id;
    int opcode, signaled, nsge;
    uint32_t len;
    struct ibv_sge sge[4];
};

struct held {                /* a request waiting at the responder */
    struct held *next;
    struct msg m;
    char *body;
    double since;
};

struct mqp {
    struct ibv_qp qp;        /* first: the user's pointer */
    struct ibv_qp_attr attr;
    int forced;
    struct conn *out;        /* our requests, their responses */
    struct conn *in;         /* their requests, our responses */
    struct wrq *sq_h, *sq_t; /* sent, waiting for a response (in order) */
    struct wrq *rq_h, *rq_t; /* posted receives */
    struct held *hq_h, *hq_t;
    double dead_since;       /* out connection lost at (0: not) */
};

struct cqe_node { struct cqe_node *next; struct ibv_wc wc; };
struct mcq {
    struct ibv_cq cq;
    struct cqe_node *h, *t;
    int armed;
};

struct mmr { struct ibv_mr mr; int access; int live; };

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static struct mqp *qps[MAX_QP];
static struct mmr *mrs[MAX_MR_SLOTS];
static int n_mr, max_mr = MAX_MR_SLOTS;
static unsigned mr_gen = 1;
static int listen_fd = -1, wake_fd = -1, stop, opened;
static pthread_t helper;
static struct ibv_device dev0, *devlist[2];
static struct ibv_context *ctx0;
static int async_pipe[2] = {-1, -1};
static long delay_us, read_delay_us, qp_error_after, sends_posted, bad_rkey;
static char sock_dir[80];
static struct conn *loose[MAX_QP];   /* accepted, HELLO not read yet */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sock_path(char *buf, size_t n, int pid) {
    snprintf(buf, n, "%s/ibmock-%d.sock", sock_dir, pid);
}

static int roce(void) {
    const char *l = getenv("GLOOCY_IBMOCK_LINK_LAYER");
    return l && strcmp(l, "ethernet") == 0;
}

static void wake(void) { uint64_t one = 1; if (write(wake_fd, &one, 8) < 0) {} }

/* -- completions ------------------------------------------------------- */

static void push_cqe(struct ibv_cq *cq, const struct ibv_wc *wc) {
    struct mcq *c = (struct mcq *)cq;
    struct cqe_node *n = calloc(1, sizeof(*n));
    if (!n) abort();
    n->wc = *wc;
    if (c->t) c->t->next = n; else c->h = n;
    c->t = n;
    if (c->armed && cq->channel) {
        c->armed = 0;
        if (write(cq->channel->refcnt, &cq, sizeof(cq)) < 0) {}   /* the write end */
    }
}

static void complete(struct mqp *q, struct ibv_cq *cq, uint64_t wr_id, int status,
                     int opcode, uint32_t len, int signaled, uint32_t imm, int with_imm) {
    struct ibv_wc wc;
    if (status == IBV_WC_SUCCESS && !signaled) return;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr_id;
    wc.status = status;
    wc.opcode = opcode;
    wc.byte_len = len;
    wc.qp_num = q->qp.qp_num;
    if (with_imm) { wc.imm_data = imm; wc.wc_flags = IBV_WC_WITH_IMM; }
    push_cqe(cq, &wc);
}

static int wc_opcode(int wr_opcode) {
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_SEND;
    }
}

static void async_event(struct ibv_qp *qp, enum ibv_event_type type) {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.element.qp = qp;
    ev.event_type = type;
    if (write(async_pipe[1], &ev, sizeof(ev)) < 0) {}
}

/* The QP goes to the error state: what is outstanding completes with
 * `first` (the oldest send) and IBV_WC_WR_FLUSH_ERR (the rest). */
static void qp_fail(struct mqp *q, int first) {
    struct wrq *w;
    struct held *h;
    q->qp.state = q->attr.qp_state = IBV_QPS_ERR;
    while ((w = q->sq_h)) {
        q->sq_h = w->next;
        complete(q, q->qp.send_cq, w->wr_id, first, wc_opcode(w->opcode), 0, 1, 0, 0);
        first = IBV_WC_WR_FLUSH_ERR;
        free(w);
    }
    q->sq_t = NULL;
    while ((w = q->rq_h)) {
        q->rq_h = w->next;
        complete(q, q->qp.recv_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 1, 0, 0);
        free(w);
    }
    q->rq_t = NULL;
    while ((h = q->hq_h)) { q->hq_h = h->next; free(h->body); free(h); }
    q->hq_t = NULL;
}

/* -- memory regions ---------------------------------------------------- */

static struct mmr *find_mr(uint32_t key) {
    uint32_t slot = key >> 8;
    struct mmr *m = slot < MAX_MR_SLOTS ? mrs[slot] : NULL;
    return m && m->live && (m->mr.lkey == key || m->mr.rkey == key) ? m : NULL;
}

/* Does MR `key` cover [addr, addr+len) with `access`? */
static int mr_allows(uint32_t key, uint64_t addr, uint64_t len, int access) {
    struct mmr *m = find_mr(key);
    uint64_t lo;
    if (!m || (m->access & access) != access) return 0;
    lo = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= lo && len <= m->mr.length && addr - lo <= m->mr.length - len;
}

/* -- messages ---------------------------------------------------------- */

static void enqueue(struct conn *c, const struct msg *m, const void *body,
                    const struct ibv_sge *sge, int nsge) {
    struct out *o;
    size_t off = sizeof(*m);
    int i;
    if (!c || c->dead) return;
    o = malloc(sizeof(*o) + sizeof(*m) + m->len);
    if (!o) abort();
    o->next = NULL; o->size = sizeof(*m) + m->len; o->done = 0;
    memcpy(o->data, m, sizeof(*m));
    if (body) memcpy(o->data + off, body, m->len);
    for (i = 0; i < nsge; i++) {
        memcpy(o->data + off, (void *)(uintptr_t)sge[i].addr, sge[i].length);
        off += sge[i].length;
    }
    if (c->ot) c->ot->next = o; else c->oh = o;
    c->ot = o;
}

static void scatter(const struct wrq *w, const char *data, uint32_t len) {
    int i;
    for (i = 0; i < w->nsge && len; i++) {
        uint32_t n = w->sge[i].length < len ? w->sge[i].length : len;
        memcpy((void *)(uintptr_t)w->sge[i].addr, data, n);
        data += n; len -= n;
    }
}

static void respond(struct mqp *q, const struct msg *req, int status,
                    const void *body, uint32_t len) {
    struct msg r;
    memset(&r, 0, sizeof(r));
    r.type = RESP; r.status = status; r.len = len; r.opcode = req->opcode;
    if (delay_us) usleep(delay_us);
    if (read_delay_us && req->type == REQ_READ) usleep(read_delay_us);
    enqueue(q->in, &r, body, NULL, 0);
}

/* Serve one request; 0 if it must wait (no receive posted: RNR). */
static int serve(struct mqp *q, struct held *h) {
    struct msg *m = &h->m;
    struct wrq *w;
    uint32_t cap = 0;
    int i, with_imm = m->opcode == IBV_WR_SEND_WITH_IMM ||
                      m->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (q->attr.qp_state == IBV_QPS_ERR) {
        respond(q, m, IBV_WC_RETRY_EXC_ERR, NULL, 0);   /* nobody answers */
        return 1;
    }
    if (q->attr.qp_state != IBV_QPS_RTR && q->attr.qp_state != IBV_QPS_RTS)
        return 0;                                       /* not ready: retried */
    if (q->in->src_qpn != q->attr.dest_qp_num || q->in->psn != q->attr.rq_psn) {
        respond(q, m, IBV_WC_RETRY_EXC_ERR, NULL, 0);   /* packets dropped */
        return 1;
    }
    if (m->type == REQ_WRITE || m->type == REQ_READ) {
        int acc = m->type == REQ_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        uint32_t n = m->type == REQ_READ ? m->rlen : m->len;
        if (!mr_allows(m->rkey, m->raddr, n, acc) ||
            !(q->attr.qp_access_flags & acc)) {
            respond(q, m, IBV_WC_REM_ACCESS_ERR, NULL, 0);
            return 1;
        }
        if (m->type == REQ_READ) {
            if (!q->attr.max_dest_rd_atomic) {
                respond(q, m, IBV_WC_REM_INV_REQ_ERR, NULL, 0);
                return 1;
            }
            respond(q, m, IBV_WC_SUCCESS, (void *)(uintptr_t)m->raddr, n);
            return 1;
        }
        if (!with_imm) {
            memcpy((void *)(uintptr_t)m->raddr, h->body, n);
            respond(q, m, IBV_WC_SUCCESS, NULL, 0);
            return 1;
        }
    }
    if (!(w = q->rq_h)) {     /* receiver not ready */
        unsigned tries = m->rnr_retry;
        double timer = 0.001 * (q->attr.min_rnr_timer ? q->attr.min_rnr_timer : 1);
        if (tries != 7 && now() - h->since > timer * (tries + 1)) {
            respond(q, m, IBV_WC_RNR_RETRY_EXC_ERR, NULL, 0);
            return 1;
        }
        return 0;
    }
    q->rq_h = w->next;
    if (!q->rq_h) q->rq_t = NULL;
    if (m->type == REQ_WRITE) {               /* with immediate */
        memcpy((void *)(uintptr_t)m->raddr, h->body, m->len);
        complete(q, q->qp.recv_cq, w->wr_id, IBV_WC_SUCCESS,
                 IBV_WC_RECV_RDMA_WITH_IMM, m->len, 1, m->imm, 1);
    } else {
        for (i = 0; i < w->nsge; i++) cap += w->sge[i].length;
        if (m->len > cap) {
            complete(q, q->qp.recv_cq, w->wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, 1, 0, 0);
            respond(q, m, IBV_WC_REM_INV_REQ_ERR, NULL, 0);
            free(w);
            qp_fail(q, IBV_WC_WR_FLUSH_ERR);
            return 1;
        }
        scatter(w, h->body, m->len);
        complete(q, q->qp.recv_cq, w->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, m->len,
                 1, m->imm, with_imm);
    }
    free(w);
    respond(q, m, IBV_WC_SUCCESS, NULL, 0);
    return 1;
}

static void serve_held(struct mqp *q) {
    struct held *h;
    while ((h = q->hq_h) && serve(q, h)) {
        q->hq_h = h->next;
        if (!q->hq_h) q->hq_t = NULL;
        free(h->body);
        free(h);
    }
}

static void on_response(struct mqp *q, const struct msg *m, const char *body) {
    struct wrq *w = q->sq_h;
    if (!w) return;
    q->sq_h = w->next;
    if (!q->sq_h) q->sq_t = NULL;
    if (m->status != IBV_WC_SUCCESS) {
        complete(q, q->qp.send_cq, w->wr_id, m->status, wc_opcode(w->opcode), 0, 1, 0, 0);
        free(w);
        qp_fail(q, IBV_WC_WR_FLUSH_ERR);
        return;
    }
    if (w->opcode == IBV_WR_RDMA_READ) scatter(w, body, m->len);
    complete(q, q->qp.send_cq, w->wr_id, IBV_WC_SUCCESS, wc_opcode(w->opcode),
             w->len, w->signaled, 0, 0);
    free(w);
}

static struct mqp *qp_by_num(uint32_t qpn) {
    uint32_t i = qpn & (MAX_QP - 1);
    return qps[i] && qps[i]->qp.qp_num == qpn ? qps[i] : NULL;
}

static void on_message(struct conn *c, int loose_slot) {
    struct msg *m = &c->in;
    struct mqp *q;
    int i;
    if (m->type == HELLO) {
        q = qp_by_num(m->dst_qpn);
        loose[loose_slot] = NULL;
        if (!q || q->in) {
            c->dead = 1;      /* no such QP: nobody answers */
            return;
        }
        c->src_qpn = m->src_qpn;   /* checked once the QP is in RTR */
        c->psn = m->psn;
        q->in = c;
        return;
    }
    for (i = 0; i < MAX_QP; i++) {
        q = qps[i];
        if (!q) continue;
        if (q->out == c && m->type == RESP) {
            on_response(q, m, c->body);
            return;
        }
        if (q->in == c) {
            struct held *h = calloc(1, sizeof(*h));
            if (!h) abort();
            h->m = *m; h->body = c->body; c->body = NULL; h->since = now();
            if (q->hq_t) q->hq_t->next = h; else q->hq_h = h;
            q->hq_t = h;
            serve_held(q);
            return;
        }
    }
}

/* Read what is there; -1 when the connection is gone. */
static int read_conn(struct conn *c, int slot) {
    for (;;) {
        ssize_t n;
        size_t want;
        char *dst;
        if (c->in_got < sizeof(struct msg)) {
            dst = (char *)&c->in + c->in_got;
            want = sizeof(struct msg) - c->in_got;
        } else {
            if (!c->body && !(c->body = malloc(c->in.len ? c->in.len : 1))) abort();
            dst = c->body + (c->in_got - sizeof(struct msg));
            want = sizeof(struct msg) + c->in.len - c->in_got;
        }
        if (want) {
            n = recv(c->fd, dst, want, MSG_DONTWAIT);
            if (n == 0) return -1;
            if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
            c->in_got += n;
            if ((size_t)n < want) continue;
            if (c->in_got == sizeof(struct msg) && c->in.len) continue;
        }
        on_message(c, slot);
        free(c->body);
        c->body = NULL;
        c->in_got = 0;
        if (c->dead) return -1;
    }
}

static int write_conn(struct conn *c) {
    struct out *o;
    while ((o = c->oh)) {
        ssize_t n = send(c->fd, o->data + o->done, o->size - o->done,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        o->done += n;
        if (o->done < o->size) return 0;
        c->oh = o->next;
        if (!c->oh) c->ot = NULL;
        free(o);
    }
    return 0;
}

static void kill_conn(struct conn *c) {
    struct out *o;
    c->dead = 1;
    while ((o = c->oh)) { c->oh = o->next; free(o); }
    c->ot = NULL;
}

/* What a lost peer means once the QP's retries would be over. */
static double retry_time(struct mqp *q) {
    const char *cap = getenv("GLOOCY_IBMOCK_RETRY_MS");
    double t = 4.096e-6 * (double)(1ull << (q->attr.timeout < 31 ? q->attr.timeout : 31))
               * (q->attr.retry_cnt + 1);
    double lim = (cap ? atof(cap) : 200) * 1e-3;
    return t < lim ? t : lim;
}

static void *serve_loop(void *arg) {
    struct pollfd pf[2 + 3 * MAX_QP];
    struct conn *who[2 + 3 * MAX_QP];
    int slot[2 + 3 * MAX_QP];
    (void)arg;
    pthread_mutex_lock(&G);
    while (!stop) {
        int n = 2, i;
        pf[0].fd = wake_fd; pf[0].events = POLLIN;
        pf[1].fd = listen_fd; pf[1].events = POLLIN;
        for (i = 0; i < MAX_QP; i++) {
            struct mqp *q = qps[i];
            struct conn *cs[2];
            int k;
            if (loose[i]) {
                pf[n].fd = loose[i]->fd; pf[n].events = POLLIN; who[n] = loose[i]; slot[n++] = i;
            }
            if (!q) continue;
            cs[0] = q->out; cs[1] = q->in;
            for (k = 0; k < 2; k++) {
                if (!cs[k] || cs[k]->dead) continue;
                pf[n].fd = cs[k]->fd;
                pf[n].events = POLLIN | (cs[k]->oh ? POLLOUT : 0);
                who[n] = cs[k]; slot[n++] = -1;
            }
        }
        pthread_mutex_unlock(&G);
        poll(pf, n, 2);
        pthread_mutex_lock(&G);
        if (pf[0].revents) { uint64_t v; if (read(wake_fd, &v, 8) < 0) {} }
        if (pf[1].revents & POLLIN) {
            int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            for (i = 0; fd >= 0 && i < MAX_QP && loose[i]; i++) {}
            if (fd >= 0 && i < MAX_QP) {
                loose[i] = calloc(1, sizeof(struct conn));
                loose[i]->fd = fd;
            } else if (fd >= 0) close(fd);
        }
        for (i = 2; i < n; i++) {
            struct conn *c = who[i];
            if (slot[i] >= 0 && loose[slot[i]] != c) continue;
            if (c->dead) continue;
            if ((pf[i].revents & POLLOUT) && write_conn(c) < 0) kill_conn(c);
            if (!c->dead && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
                && read_conn(c, slot[i]) < 0) {
                kill_conn(c);
                if (slot[i] >= 0 && loose[slot[i]] == c) {
                    loose[slot[i]] = NULL; close(c->fd); free(c->body); free(c);
                }
            }
        }
        for (i = 0; i < MAX_QP; i++) {
            struct mqp *q = qps[i];
            if (!q) continue;
            if (q->hq_h) serve_held(q);
            if (q->in && q->in->oh && !q->in->dead && write_conn(q->in) < 0) kill_conn(q->in);
            if (q->out && q->out->oh && !q->out->dead && write_conn(q->out) < 0) kill_conn(q->out);
            if (q->out && q->out->dead && q->attr.qp_state == IBV_QPS_RTS) {
                if (!q->dead_since) q->dead_since = now();
                if (q->sq_h && now() - q->dead_since > retry_time(q))
                    qp_fail(q, IBV_WC_RETRY_EXC_ERR);
            }
        }
    }
    pthread_mutex_unlock(&G);
    return NULL;
}

/* A process that exits without closing the device leaves no socket file. */
__attribute__((destructor)) static void unlink_socket(void) {
    char path[256];
    if (opened) { sock_path(path, sizeof(path), getpid()); unlink(path); }
}

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
    a->state = getenv("GLOOCY_IBMOCK_PORT_DOWN") ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
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
    mrs[i] = m;
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
    pthread_mutex_unlock(&G);
    free(m);
    return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
    struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
    int p[2];
    if (!ch || pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) { free(ch); return NULL; }
    ch->context = c;
    ch->fd = p[0];
    ch->refcnt = p[1];        /* the write end (the real library counts CQs here) */
    return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
    close(ch->fd); close(ch->refcnt);
    free(ch);
    return 0;
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
