/*
 * lab_common.h - helpers shared by the course examples of chapters 6, 8, 10 and 11.
 *
 * Chapter 5 (05_rc_loopback.c) builds everything below by hand, step by step. Later
 * chapters reuse the same steps from here so that each program can focus on its topic:
 *
 *   open_device()   the named device, or the first one
 *   pick_gid()      the GID to be addressed by: on RoCE a v2 GID of the chosen network
 *                   interface, with an IPv4 address if it has one (the lab: index 1,
 *                   ::ffff:10.0.2.15); on InfiniBand the port GID (index 0)
 *   random_psn()    a fresh random 24-bit packet sequence number (ah_attr.h)
 *   loop_open()     context, PD, two CQs and two RC QPs ("A" and "B") on one device
 *   qp_connect()    RESET -> INIT -> RTR -> RTS for one QP, with the remote rights it grants
 *   loop_connect()  the same for both QPs, A connected to B
 *   poll_wc()       busy-poll one completion, with a time limit
 *   loop_close()    teardown in the right order
 *
 * Everything returns 0 on success and -1 on failure after printing why on stderr.
 */
#ifndef LAB_COMMON_H
#define LAB_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "ah_attr.h"

/*
 * rnr_retry for connections that expect no RNR at all: finite, so that a receiver that
 * falls behind becomes IBV_WC_RNR_RETRY_EXC_ERR instead of a silent stall (chapter 8).
 * 7 would mean "retry forever".
 */
#define LAB_RNR_RETRY 6

/* Print an error line on stderr, prefixed so that tests and readers spot it. */
#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                     \
		fputc('\n', stderr);                                                       \
	} while (0)

/* Microseconds on a monotonic clock. */
/*
 * A point where `rdmactl lesson exercise check` looks at the program from outside: when it
 * runs the program it sets LAB_CHECKPOINT, and the program stops itself here (SIGSTOP)
 * until the checker has read `rdma resource show` and lets it go on. Run by hand, it does
 * nothing.
 */
static inline void lab_checkpoint(void)
{
	if (getenv("LAB_CHECKPOINT"))
		raise(SIGSTOP);
}

static inline double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The symbolic name of a completion status, e.g. "IBV_WC_REM_ACCESS_ERR". */
static inline const char *wc_status_name(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
	case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
	case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
	case IBV_WC_LOC_EEC_OP_ERR: return "IBV_WC_LOC_EEC_OP_ERR";
	case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
	case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
	case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR";
	case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR";
	case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
	case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
	case IBV_WC_LOC_RDD_VIOL_ERR: return "IBV_WC_LOC_RDD_VIOL_ERR";
	case IBV_WC_REM_INV_RD_REQ_ERR: return "IBV_WC_REM_INV_RD_REQ_ERR";
	case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR";
	case IBV_WC_INV_EECN_ERR: return "IBV_WC_INV_EECN_ERR";
	case IBV_WC_INV_EEC_STATE_ERR: return "IBV_WC_INV_EEC_STATE_ERR";
	case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
	case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR";
	case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
	default: return "IBV_WC_(unknown)";
	}
}

/* The name of a QP state, e.g. "RTS". */
static inline const char *qp_state_name(enum ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_RESET: return "RESET";
	case IBV_QPS_INIT: return "INIT";
	case IBV_QPS_RTR: return "RTR";
	case IBV_QPS_RTS: return "RTS";
	case IBV_QPS_SQD: return "SQD";
	case IBV_QPS_SQE: return "SQE";
	case IBV_QPS_ERR: return "ERR";
	default: return "UNKNOWN";
	}
}

/*
 * Open the device called `want`, or the first device when `want` is NULL.
 * Returns NULL (after printing why) when there is none.
 */
static inline struct ibv_context *open_device(const char *want)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list) {
		FAIL("ibv_get_device_list: %s", strerror(errno));
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (want && strcmp(ibv_get_device_name(list[i]), want) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx)
			FAIL("ibv_open_device(%s): %s", ibv_get_device_name(list[i]),
			     strerror(errno));
		break;
	}
	if (i == n)
		FAIL("no RDMA device%s%s (%d found)", want ? " named " : "", want ? want : "",
		     n);
	ibv_free_device_list(list);
	return ctx;
}

/*
 * The network interface whose GIDs to use: $RDMA_NETDEV if set (e.g. a VLAN interface, or
 * the fabric NIC of a multi-homed host), else NULL: any interface of the port.
 */
static inline const char *lab_netdev(void)
{
	const char *n = getenv("RDMA_NETDEV");

	return n && *n ? n : NULL;
}

/*
 * Pick the GID to be addressed by on `port`.
 *   RoCE: a RoCE v2 GID that belongs to `netdev` (NULL: to any interface), preferring one
 *   that carries an IPv4 address (::ffff:a.b.c.d). Each GID of a RoCE port is tied to one
 *   network interface; picking by interface, not by a fixed index, keeps working when
 *   addresses (and so table slots) come and go.
 *   InfiniBand: the port GID, index 0 (subnet prefix + port GUID); it is only put on the
 *   wire when a packet leaves the subnet (see ah_attr.h).
 * Returns 0 with *index and *gid set, or -1 (after printing why) when there is none.
 */
static inline int pick_gid(struct ibv_context *ctx, uint8_t port, const char *netdev,
			   int *index, union ibv_gid *gid)
{
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;
	unsigned int want_if = 0;
	int i, any_v2 = -1, v4 = -1;
	static const uint8_t v4prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (ibv_query_port(ctx, port, &pa)) {
		FAIL("ibv_query_port: %s", strerror(errno));
		return -1;
	}
	if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		*index = 0;
	} else {
		if (netdev) {
			want_if = if_nametoindex(netdev);
			if (!want_if) {
				FAIL("network interface %s: %s", netdev, strerror(errno));
				return -1;
			}
		}
		for (i = 0; i < pa.gid_tbl_len; i++) {
			if (ibv_query_gid_ex(ctx, port, i, &e, 0))
				continue; /* empty slot */
			if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
				continue;
			if (want_if && e.ndev_ifindex != want_if)
				continue;
			if (any_v2 < 0)
				any_v2 = i;
			if (v4 < 0 && memcmp(e.gid.raw, v4prefix, sizeof(v4prefix)) == 0)
				v4 = i;
		}
		*index = v4 >= 0 ? v4 : any_v2;
		if (*index < 0) {
			FAIL("port %u has no RoCE v2 GID%s%s", port, netdev ? " on " : "",
			     netdev ? netdev : "");
			return -1;
		}
	}
	if (ibv_query_gid(ctx, port, *index, gid)) {
		FAIL("ibv_query_gid(%d): %s", *index, strerror(errno));
		return -1;
	}
	return 0;
}

/* Two RC QPs on one device, A (index 0) and B (index 1), each with its own CQ. */
struct loop {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	uint8_t port;
	struct ibv_port_attr pa; /* link layer, LID, active MTU */
	int gid_index;
	union ibv_gid gid;
	uint32_t psn[2]; /* each QP's initial send PSN, fresh for every connection */
	uint8_t retry_cnt; /* RTS retry_cnt of both QPs: 7 unless changed before connecting */
};

/* Free whatever exists, children before parents: QPs, CQs, PD, context. */
static inline void loop_close(struct loop *l)
{
	int i;

	for (i = 0; i < 2; i++)
		if (l->qp[i] && ibv_destroy_qp(l->qp[i]))
			FAIL("ibv_destroy_qp");
	for (i = 0; i < 2; i++)
		if (l->cq[i] && ibv_destroy_cq(l->cq[i]))
			FAIL("ibv_destroy_cq");
	if (l->pd && ibv_dealloc_pd(l->pd))
		FAIL("ibv_dealloc_pd");
	if (l->ctx && ibv_close_device(l->ctx))
		FAIL("ibv_close_device");
	memset(l, 0, sizeof(*l));
}

static inline int loop_open(struct loop *l, const char *dev)
{
	struct ibv_qp_init_attr init;
	struct ibv_port_attr pa;
	char gidtxt[INET6_ADDRSTRLEN];
	int i;

	memset(l, 0, sizeof(*l));
	l->port = 1;
	l->retry_cnt = 7;
	l->ctx = open_device(dev);
	if (!l->ctx)
		return -1;
	if (ibv_query_port(l->ctx, l->port, &pa)) {
		FAIL("ibv_query_port: %s", strerror(errno));
		goto fail;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		FAIL("port %u is %s, not ACTIVE", l->port, ibv_port_state_str(pa.state));
		goto fail;
	}
	l->pa = pa;
	if (pick_gid(l->ctx, l->port, lab_netdev(), &l->gid_index, &l->gid))
		goto fail;
	l->pd = ibv_alloc_pd(l->ctx);
	if (!l->pd) {
		FAIL("ibv_alloc_pd: %s", strerror(errno));
		goto fail;
	}
	for (i = 0; i < 2; i++) {
		l->cq[i] = ibv_create_cq(l->ctx, 64, NULL, NULL, 0);
		if (!l->cq[i]) {
			FAIL("ibv_create_cq: %s", strerror(errno));
			goto fail;
		}
		memset(&init, 0, sizeof(init));
		init.send_cq = l->cq[i];
		init.recv_cq = l->cq[i];
		init.qp_type = IBV_QPT_RC;
		init.sq_sig_all = 1; /* every send WR produces a completion */
		init.cap.max_send_wr = 32;
		init.cap.max_recv_wr = 32;
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		l->qp[i] = ibv_create_qp(l->pd, &init);
		if (!l->qp[i]) {
			FAIL("ibv_create_qp: %s", strerror(errno));
			goto fail;
		}
	}
	inet_ntop(AF_INET6, l->gid.raw, gidtxt, sizeof(gidtxt));
	printf("device %s port %u gid[%d] %s qp A 0x%06x qp B 0x%06x\n",
	       ibv_get_device_name(l->ctx->device), l->port, l->gid_index, gidtxt,
	       l->qp[0]->qp_num, l->qp[1]->qp_num);
	return 0;
fail:
	loop_close(l);
	return -1;
}

/* What QP `i` of the loop tells its peer: QPN, fresh PSN, our LID and GID. */
static inline struct conn_info loop_info(const struct loop *l, int i)
{
	struct conn_info c = { .qpn = l->qp[i]->qp_num, .psn = l->psn[i], .lid = l->pa.lid,
			       .gid = l->gid };

	return c;
}

/*
 * Move QP `i` of the loop through RESET -> INIT -> RTR -> RTS, connected to `peer`.
 * `access` is what the PEER may do to memory through this QP (IBV_ACCESS_REMOTE_*):
 * grant only what the program needs; the responder refuses the rest with
 * IBV_WC_REM_INV_REQ_ERR, whatever the MR's rkey allows. rnr_retry is 0..7
 * (7 = retry forever). The QP sends from l->psn[i].
 */
static inline int qp_connect(struct loop *l, int i, const struct conn_info *peer, int access,
			     uint8_t rnr_retry)
{
	struct ibv_qp *qp = l->qp[i];
	struct ibv_qp_attr a;
	const char *why = "";
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (rc) {
		FAIL("modify to RESET: %s", strerror(rc));
		return -1;
	}

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = l->port;
	a.qp_access_flags = access;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc) {
		FAIL("modify to INIT: %s", strerror(rc));
		return -1;
	}

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = l->pa.active_mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = (access & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)) ? 4 : 0;
	a.min_rnr_timer = 12; /* 0.64 ms */
	if (ah_attr_for(&a.ah_attr, l->pa.link_layer, l->port, l->gid_index, &l->gid, peer,
			&why)) {
		FAIL("address vector: %s", why);
		return -1;
	}
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		FAIL("modify to RTR: %s", strerror(rc));
		return -1;
	}

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = l->psn[i];
	a.timeout = 14; /* 4.096 us * 2^14 = 67 ms */
	a.retry_cnt = l->retry_cnt;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 4;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc) {
		FAIL("modify to RTS: %s", strerror(rc));
		return -1;
	}
	return 0;
}

/*
 * (Re)connect A and B to each other: `grant_a` is what B may do through A's QP, `grant_b`
 * what A may do through B's (0: two-sided only). Both start from RESET with fresh PSNs,
 * so this also recovers QPs in ERR.
 */
static inline int loop_connect(struct loop *l, int grant_a, int grant_b, uint8_t rnr_retry)
{
	struct conn_info a, b;

	l->psn[0] = random_psn();
	l->psn[1] = random_psn();
	a = loop_info(l, 0);
	b = loop_info(l, 1);
	if (qp_connect(l, 0, &b, grant_a, rnr_retry))
		return -1;
	return qp_connect(l, 1, &a, grant_b, rnr_retry);
}

/* The current state of a QP as the device reports it, or -1. */
static inline int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

/*
 * Busy-poll one completion from `cq`. Returns 1 with *wc filled, 0 when nothing arrived
 * within timeout_ms, -1 when polling itself failed.
 */
static inline int poll_wc(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms)
{
	double deadline = now_us() + timeout_ms * 1000.0;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			FAIL("ibv_poll_cq: %d", n);
			return -1;
		}
		if (n == 1)
			return 1;
	} while (now_us() < deadline);
	return 0;
}

/* Post one signaled work request on `qp` with a single SGE. */
static inline int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
			   void *buf, uint32_t len, uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		FAIL("ibv_post_send: %s", strerror(rc));
	return rc ? -1 : 0;
}

/* Post one receive WR on `qp` for `len` bytes at `buf`. */
static inline int post_recv_one(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
				uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	rc = ibv_post_recv(qp, &wr, &bad);
	if (rc)
		FAIL("ibv_post_recv: %s", strerror(rc));
	return rc ? -1 : 0;
}

#endif /* LAB_COMMON_H */
