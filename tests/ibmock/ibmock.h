/* The stand-in's shared state and helpers (see ibmock.c). */
#ifndef GLOOCY_IBMOCK_H
#define GLOOCY_IBMOCK_H
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
#include <sys/stat.h>
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

struct mmr {
    struct ibv_mr mr;
    int access, live;
    size_t pinned;           /* bytes counted against the limit (whole pages) */
    uintptr_t page0;         /* the first page's address ... */
    uint64_t *pfn;           /* ... and the physical pages seen at registration
                                (NULL: not known, the check is off) */
    size_t npages;
};

extern pthread_mutex_t G;
extern struct mqp *qps[MAX_QP];
extern struct mmr *mrs[MAX_MR_SLOTS];
extern int n_mr, max_mr;
extern long long mr_bytes, max_mr_bytes;
extern unsigned mr_gen;
extern int listen_fd, wake_fd, stop, opened;
extern pthread_t helper;
extern struct ibv_device dev0, *devlist[2];
extern struct ibv_context *ctx0;
extern int async_pipe[2];
extern long delay_us, read_delay_us, qp_error_after, sends_posted, bad_rkey;
extern const char *port_err_file;
extern int port_failed;
extern char sock_dir[80];
extern struct conn *loose[MAX_QP];

double now(void);
void sock_path(char *buf, size_t n, int pid);
int roce(void);
void wake(void);
void push_cqe(struct ibv_cq *cq, const struct ibv_wc *wc);
void complete(struct mqp *q, struct ibv_cq *cq, uint64_t wr_id, int status, int opcode, uint32_t len, int signaled, uint32_t imm, int with_imm);
int wc_opcode(int wr_opcode);
void async_event(struct ibv_qp *qp, enum ibv_event_type type);
void qp_fail(struct mqp *q, int first);
struct mmr *find_mr(uint32_t key);
void mr_pages(struct mmr *m);
void mr_pages_close(void);
int mr_pages_fd(void);
int mr_allows(uint32_t key, uint64_t addr, uint64_t len, int access);
void enqueue(struct conn *c, const struct msg *m, const void *body, const struct ibv_sge *sge, int nsge);
void serve_held(struct mqp *q);
void kill_conn(struct conn *c);
void *serve_loop(void *arg);

#endif
