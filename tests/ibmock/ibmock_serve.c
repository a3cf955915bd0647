/* The stand-in's helper thread: requests and responses between queue
 * pairs over Unix sockets, the responder's checks, completions (see
 * ibmock.c for the whole). */
#define _GNU_SOURCE
#include "ibmock.h"
#include <sys/mman.h>

pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
struct mqp *qps[MAX_QP];
struct mmr *mrs[MAX_MR_SLOTS];
int n_mr, max_mr = MAX_MR_SLOTS;
long long mr_bytes, max_mr_bytes;   /* registered (whole pages); 0: no limit */
unsigned mr_gen = 1;
int listen_fd = -1, wake_fd = -1, stop, opened;
pthread_t helper;
struct ibv_device dev0, *devlist[2];
struct ibv_context *ctx0;
int async_pipe[2] = {-1, -1};
long delay_us, read_delay_us, qp_error_after, sends_posted, bad_rkey;
const char *port_err_file;   /* the port goes down once it exists */
int port_failed;
char sock_dir[80];
struct conn *loose[MAX_QP];   /* accepted, HELLO not read yet */

double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

void sock_path(char *buf, size_t n, int pid) {
    snprintf(buf, n, "%s/ibmock-%d.sock", sock_dir, pid);
}

int roce(void) {
    const char *l = getenv("GLOOCY_IBMOCK_LINK_LAYER");
    return l && strcmp(l, "ethernet") == 0;
}

void wake(void) { uint64_t one = 1; if (write(wake_fd, &one, 8) < 0) {} }

/* -- completions ------------------------------------------------------- */

void push_cqe(struct ibv_cq *cq, const struct ibv_wc *wc) {
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

void complete(struct mqp *q, struct ibv_cq *cq, uint64_t wr_id, int status,
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

int wc_opcode(int wr_opcode) {
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_SEND;
    }
}

void async_event(struct ibv_qp *qp, enum ibv_event_type type) {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.element.qp = qp;
    ev.event_type = type;
    if (write(async_pipe[1], &ev, sizeof(ev)) < 0) {}
}

/* The QP goes to the error state: what is outstanding completes with
 * `first` (the oldest send) and IBV_WC_WR_FLUSH_ERR (the rest). */
void qp_fail(struct mqp *q, int first) {
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

struct mmr *find_mr(uint32_t key) {
    uint32_t slot = key >> 8;
    struct mmr *m = slot < MAX_MR_SLOTS ? mrs[slot] : NULL;
    return m && m->live && (m->mr.lkey == key || m->mr.rkey == key) ? m : NULL;
}

/* Stale registrations. ibv_reg_mr pins the pages behind a range; memory
 * unmapped and mapped again at the same address gets other pages, and an
 * HCA goes on using the old, pinned ones: silent corruption. The stand-in
 * pins nothing, but it remembers which physical pages backed an MR
 * (/proc/self/pagemap) and fails an access through it when they changed,
 * so that a stale registration shows in tests. The page frame numbers need
 * CAP_SYS_ADMIN; without it they read as 0 and the check is off. */
static int pagemap_fd = -2;

/* The frame numbers of n pages from page0 (0: not present); -1 if unknown. */
static int read_pfns(uintptr_t page0, size_t n, uint64_t *out) {
    long ps = sysconf(_SC_PAGESIZE);
    size_t i;
    if (pagemap_fd == -2) pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap_fd < 0 ||
        pread(pagemap_fd, out, n * 8, (off_t)(page0 / ps) * 8) != (ssize_t)(n * 8))
        return -1;
    for (i = 0; i < n; i++)
        out[i] = (out[i] >> 63) ? out[i] & ((1ull << 55) - 1) : 0;
    return 0;
}

/* At registration: fault the pages in, writable where the mapping allows
 * (as pinning them does), and remember them. */
void mr_pages(struct mmr *m) {
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)m->mr.addr & ~(uintptr_t)(ps - 1);
    uintptr_t hi = ((uintptr_t)m->mr.addr + m->mr.length + ps - 1) & ~(uintptr_t)(ps - 1);
    size_t i;
    m->page0 = lo;
    m->npages = (hi - lo) / ps;
    m->pinned = hi - lo;
    if (!m->mr.length || !(m->pfn = malloc(m->npages * 8))) return;
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) != 0)
        madvise((void *)lo, hi - lo, MADV_POPULATE_READ);
    if (read_pfns(lo, m->npages, m->pfn) == 0)
        for (i = 0; i < m->npages; i++)
            if (m->pfn[i]) return;
    free(m->pfn);                   /* unknown (unprivileged): no check */
    m->pfn = NULL;
}

int mr_pages_fd(void) { return pagemap_fd; }

void mr_pages_close(void) {
    if (pagemap_fd >= 0) close(pagemap_fd);
    pagemap_fd = -2;
}

/* Are [addr, addr+len) of m still on the pages it was registered over? */
static int same_pages(const struct mmr *m, uint64_t addr, uint64_t len) {
    long ps = sysconf(_SC_PAGESIZE);
    size_t first, n, i;
    uint64_t now_pfn[64];
    if (!m->pfn || !len) return 1;
    first = (addr - m->page0) / ps;
    n = (addr + len - 1 - m->page0) / ps + 1 - first;
    for (i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64, j;
        if (read_pfns(m->page0 + (first + i) * ps, k, now_pfn) != 0) return 1;
        for (j = 0; j < k; j++)
            if (now_pfn[j] != m->pfn[first + i + j]) {
                fprintf(stderr, "ibmock: a stale memory registration (key %#x): the "
                        "pages at %#lx are not the ones registered\n", m->mr.lkey,
                        (unsigned long)(m->page0 + (first + i + j) * ps));
                return 0;
            }
    }
    return 1;
}

/* Does MR `key` cover [addr, addr+len) with `access`, on its own pages? */
int mr_allows(uint32_t key, uint64_t addr, uint64_t len, int access) {
    struct mmr *m = find_mr(key);
    uint64_t lo;
    if (!m || (m->access & access) != access) return 0;
    lo = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= lo && len <= m->mr.length && addr - lo <= m->mr.length - len
           && same_pages(m, addr, len);
}

/* -- messages ---------------------------------------------------------- */

void enqueue(struct conn *c, const struct msg *m, const void *body,
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

void serve_held(struct mqp *q) {
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

void kill_conn(struct conn *c) {
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

void *serve_loop(void *arg) {
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
        if (port_err_file && !port_failed && access(port_err_file, F_OK) == 0) {
            /* the link is gone: nothing reaches the peers any more */
            port_failed = 1;
            async_event(NULL, IBV_EVENT_PORT_ERR);
            for (i = 0; i < MAX_QP; i++)
                if (qps[i] && qps[i]->out) kill_conn(qps[i]->out);
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

