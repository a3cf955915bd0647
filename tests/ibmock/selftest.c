/* The stand-in checked against what hardware does, through the real
 * <infiniband/verbs.h> (its inline ibv_post_send/ibv_post_recv/ibv_poll_cq
 * dispatch into the stand-in's ops): two RC queue pairs of one process
 * connected to each other. Prints one line per check; exits 1 on a failure.
 */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, what) do { int ok_ = !!(cond); printf("%s %s\n", ok_ ? "ok  " : "FAIL", what); \
                               if (!ok_) failures++; } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *chan;

static struct ibv_qp *make_qp(struct ibv_cq *cq) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = cq;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RC;
    return ibv_create_qp(pd, &a);
}

static int to_init(struct ibv_qp *qp, int access) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = access;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct ibv_qp *qp, uint32_t dest, int rnr_retry) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_4096; a.dest_qp_num = dest;
    a.rq_psn = dest & 0xffffff; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.dlid = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS; a.timeout = 10; a.retry_cnt = 1; a.rnr_retry = rnr_retry;
    a.sq_psn = qp->qp_num & 0xffffff; a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* The next completion on cq (waiting up to 3 s). */
static struct ibv_wc next_wc(struct ibv_cq *cq) {
    struct ibv_wc wc;
    int i;
    memset(&wc, 0, sizeof(wc));
    wc.status = -1;
    for (i = 0; i < 3000; i++) {
        if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
        usleep(1000);
    }
    return wc;
}

static int post(struct ibv_qp *qp, int opcode, void *buf, uint32_t len, uint32_t lkey,
                uint64_t raddr, uint32_t rkey, uint32_t imm) {
    struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 7; wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED; wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr; wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey) {
    struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 9; wr.sg_list = &sge; wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

int main(void) {
    int n;
    struct ibv_device **devs = ibv_get_device_list(&n);
    char *a_buf = calloc(1, 65536), *b_buf = calloc(1, 65536);
    struct ibv_cq *cqa, *cqb, *ev_cq;
    struct ibv_qp *qa, *qb, *qc, *qd;
    struct ibv_mr *ma, *mb, *mro;
    struct ibv_wc wc;
    struct pollfd pfd;
    void *ev_ctx;
    struct ibv_qp_attr attr;

    CHECK(devs && n == 1, "one device");
    ctx = ibv_open_device(devs[0]);
    pd = ibv_alloc_pd(ctx);
    chan = ibv_create_comp_channel(ctx);
    cqa = ibv_create_cq(ctx, 64, NULL, chan, 0);
    cqb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    qa = make_qp(cqa); qb = make_qp(cqb);
    ma = ibv_reg_mr(pd, a_buf, 65536, IBV_ACCESS_LOCAL_WRITE);
    mb = ibv_reg_mr(pd, b_buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                    IBV_ACCESS_REMOTE_READ);
    mro = ibv_reg_mr(pd, b_buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    CHECK(ibv_modify_qp(qa, &attr, IBV_QP_STATE) != 0, "RESET -> RTS is refused");
    CHECK(post(qa, IBV_WR_SEND, a_buf, 8, ma->lkey, 0, 0, 0) != 0, "post_send in RESET is refused");
    CHECK(to_init(qa, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) == 0 &&
          to_init(qb, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) == 0, "RESET -> INIT");
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    CHECK(ibv_modify_qp(qa, &attr, IBV_QP_STATE) != 0, "INIT -> RTR without its attributes is refused");
    CHECK(to_rts(qa, qb->qp_num, 7) == 0 && to_rts(qb, qa->qp_num, 7) == 0, "INIT -> RTR -> RTS");

    /* SEND_WITH_IMM, completion channel */
    ibv_req_notify_cq(cqa, 0);
    CHECK(post_recv(qa, a_buf, 1024, ma->lkey) == 0, "post_recv");
    strcpy(b_buf, "hello");
    post(qb, IBV_WR_SEND_WITH_IMM, b_buf, 6, mb->lkey, 0, 0, 42);
    wc = next_wc(cqb);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send completes at the sender");
    pfd.fd = chan->fd; pfd.events = POLLIN;
    CHECK(poll(&pfd, 1, 3000) == 1, "the completion channel fd becomes readable");
    CHECK(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0 && ev_cq == cqa, "ibv_get_cq_event names the CQ");
    ibv_ack_cq_events(cqa, 1);
    wc = next_wc(cqa);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 6 &&
          (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 42 &&
          strcmp(a_buf, "hello") == 0, "received with its immediate");

    /* RDMA write, read, write with immediate */
    strcpy(a_buf, "written");
    post(qa, IBV_WR_RDMA_WRITE, a_buf, 8, ma->lkey, (uintptr_t)b_buf + 100, mb->rkey, 0);
    wc = next_wc(cqa);
    CHECK(wc.status == IBV_WC_SUCCESS && strcmp(b_buf + 100, "written") == 0, "RDMA write");
    strcpy(b_buf + 200, "read me");
    post(qa, IBV_WR_RDMA_READ, a_buf + 300, 8, ma->lkey, (uintptr_t)b_buf + 200, mb->rkey, 0);
    wc = next_wc(cqa);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
          strcmp(a_buf + 300, "read me") == 0, "RDMA read");
    post_recv(qb, b_buf, 0, mb->lkey);
    post(qa, IBV_WR_RDMA_WRITE_WITH_IMM, a_buf, 8, ma->lkey, (uintptr_t)b_buf + 400, mb->rkey, 5);
    wc = next_wc(cqa);
    CHECK(wc.status == IBV_WC_SUCCESS, "RDMA write with immediate: the sender");
    wc = next_wc(cqb);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
          ntohl(wc.imm_data) == 5 && wc.byte_len == 8, "RDMA write with immediate: the receiver");

    /* what hardware refuses */
    post(qa, IBV_WR_RDMA_WRITE, a_buf, 8, ma->lkey, (uintptr_t)b_buf + 4096, mro->rkey, 0);
    wc = next_wc(cqa);
    CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "a write to memory registered read-only: REM_ACCESS_ERR");
    memset(&attr, 0, sizeof(attr));
    CHECK(post(qa, IBV_WR_SEND, a_buf, 8, ma->lkey, 0, 0, 0) == 0 &&
          next_wc(cqa).status == IBV_WC_WR_FLUSH_ERR, "the QP is in error: later work is flushed");

    qc = make_qp(cqa); qd = make_qp(cqb);
    to_init(qc, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    to_init(qd, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    to_rts(qc, qd->qp_num, 1); to_rts(qd, qc->qp_num, 1);
    post(qc, IBV_WR_RDMA_READ, a_buf, 64, ma->lkey, (uintptr_t)b_buf + 4090, mb->rkey, 0);
    CHECK(next_wc(cqa).status == IBV_WC_REM_ACCESS_ERR, "a read past the end of the region: REM_ACCESS_ERR");

    qc = make_qp(cqa); qd = make_qp(cqb);
    to_init(qc, 0); to_init(qd, 0);
    to_rts(qc, qd->qp_num, 1); to_rts(qd, qc->qp_num, 1);
    post(qc, IBV_WR_SEND, a_buf, 8, ma->lkey + 1, 0, 0, 0);
    CHECK(next_wc(cqa).status == IBV_WC_LOC_PROT_ERR, "a bad lkey: LOC_PROT_ERR");

    qc = make_qp(cqa); qd = make_qp(cqb);
    to_init(qc, 0); to_init(qd, 0);
    to_rts(qc, qd->qp_num, 1); to_rts(qd, qc->qp_num, 1);
    post(qc, IBV_WR_RDMA_WRITE, a_buf, 8, ma->lkey, (uintptr_t)b_buf, mb->rkey, 0);
    CHECK(next_wc(cqa).status == IBV_WC_REM_ACCESS_ERR, "a QP without remote write access: REM_ACCESS_ERR");

    qc = make_qp(cqa); qd = make_qp(cqb);
    to_init(qc, 0); to_init(qd, 0);
    to_rts(qc, qd->qp_num, 1); to_rts(qd, qc->qp_num, 1);
    post(qc, IBV_WR_SEND, a_buf, 8, ma->lkey, 0, 0, 0);   /* no receive posted */
    CHECK(next_wc(cqa).status == IBV_WC_RNR_RETRY_EXC_ERR, "no receive, rnr_retry 1: RNR_RETRY_EXC_ERR");

    qc = make_qp(cqa); qd = make_qp(cqb);
    to_init(qc, 0); to_init(qd, 0);
    to_rts(qc, qd->qp_num, 7); to_rts(qd, qc->qp_num, 7);
    post(qc, IBV_WR_SEND, a_buf, 8, ma->lkey, 0, 0, 0);
    usleep(100000);
    CHECK(ibv_poll_cq(cqa, 1, &wc) == 0, "no receive, rnr_retry 7: the send waits");
    post_recv(qd, b_buf, 64, mb->lkey);
    CHECK(next_wc(cqa).status == IBV_WC_SUCCESS, "... and completes once a receive is posted");
    next_wc(cqb);

    /* memory unmapped and mapped again at the same address under an MR:
     * hardware would use the old pages; the stand-in fails (it needs the
     * page frame numbers, which only a privileged process can read) */
    if (geteuid() == 0) {
        char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        struct ibv_mr *ms = ibv_reg_mr(pd, p, 8192, IBV_ACCESS_LOCAL_WRITE);
        char *q, *scratch;
        qc = make_qp(cqa); qd = make_qp(cqb);
        to_init(qc, 0); to_init(qd, 0);
        to_rts(qc, qd->qp_num, 7); to_rts(qd, qc->qp_num, 7);
        post_recv(qd, b_buf, 64, mb->lkey);
        post(qc, IBV_WR_SEND, p, 8, ms->lkey, 0, 0, 0);
        CHECK(next_wc(cqa).status == IBV_WC_SUCCESS, "a registered mapping can be sent");
        next_wc(cqb);
        munmap(p, 8192);
        /* take the freed pages (the allocator would hand them out again
         * first), as they would stay pinned under the MR on hardware */
        scratch = mmap(NULL, 1 << 22, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(scratch, 1, 1 << 22);
        q = mmap(p, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        memset(q, 1, 8192);
        post(qc, IBV_WR_SEND, q, 8, ms->lkey, 0, 0, 0);
        CHECK(q == p && next_wc(cqa).status == IBV_WC_LOC_PROT_ERR,
              "its memory unmapped and mapped again at the same address: LOC_PROT_ERR");
    } else {
        printf("skip a stale registration (page frame numbers need CAP_SYS_ADMIN)\n");
    }

    ibv_close_device(ctx);
    printf("%d failures\n", failures);
    return failures != 0;
}
