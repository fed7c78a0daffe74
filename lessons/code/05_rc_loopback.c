/*
 * 05_rc_loopback.c - chapter 5: the whole verbs sequence, step by step, in one file.
 *
 * Two RC queue pairs on ONE device talk to each other through the device's port, exactly
 * as two machines would; only the "exchange of connection data" is a memcpy instead of a
 * TCP socket. Then A SENDs a message to B, and A and B play ping-pong to time a round trip.
 *
 *   1 device list -> 2 context -> 3 PD -> 4 MRs -> 5 CQs -> 6 QPs
 *   -> 7 exchange (QPN, PSN, LID, GID) -> 8 connect (INIT, RTR, RTS)
 *   -> 9 post RECV on B, SEND on A, poll both CQs -> 10 ping-pong -> 11 teardown
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 05_rc_loopback 05_rc_loopback.c -libverbs
 * Run:   ./05_rc_loopback [device] [iterations] [gid-index]
 *
 * The address vector of step 8 comes from ah_attr.h (also used by the later chapters):
 * on InfiniBand it addresses the peer by LID, on RoCE by GID.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "ah_attr.h" /* struct conn_info (step 7) and ah_attr_for() (step 8) */

#define MSG_SIZE 64
#define PORT 1
#define QUEUE_DEPTH 16 /* WRs each queue of a QP holds */

struct side {
	const char *name;
	char *buf; /* MSG_SIZE bytes to send from, then MSG_SIZE bytes to receive into */
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct conn_info me;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Step 8: RESET -> INIT -> RTR -> RTS, using what the peer told us. */
static int connect_qp(struct side *s, const struct conn_info *peer,
		      const struct ibv_port_attr *pa, int gid_index)
{
	struct ibv_qp_attr a;
	const char *why = "";
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = PORT;
	a.pkey_index = 0;
	a.qp_access_flags = 0; /* two-sided only: no remote access needed */
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		goto fail;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa->active_mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 0;
	a.min_rnr_timer = 12;
	/* The path to the peer: by LID on InfiniBand, by GID (a GRH) on RoCE. */
	if (ah_attr_for(&a.ah_attr, pa->link_layer, PORT, gid_index, &s->me.gid, peer, &why)) {
		fprintf(stderr, "FAIL: %s: %s\n", s->name, why);
		return -1;
	}
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc)
		goto fail;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = s->me.psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 6; /* finite: a receiver falling behind is an error, not a stall */
	a.max_rd_atomic = 0;
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "FAIL: %s: ibv_modify_qp: %s\n", s->name, strerror(rc));
	return -1;
}

static int post_recv(struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + MSG_SIZE), MSG_SIZE, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	int rc = ibv_post_recv(s->qp, &wr, &bad);

	if (rc)
		fprintf(stderr, "FAIL: %s: ibv_post_recv: %s\n", s->name, strerror(rc));
	return rc ? -1 : 0;
}

static int post_send(struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)s->buf, MSG_SIZE, s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(s->qp, &wr, &bad);

	if (rc)
		fprintf(stderr, "FAIL: %s: ibv_post_send: %s\n", s->name, strerror(rc));
	return rc ? -1 : 0;
}

/* Busy-poll one completion (up to 2 s) and check it succeeded with the opcode we expect. */
static int wait_wc(struct side *s, enum ibv_wc_opcode want, struct ibv_wc *wc)
{
	double deadline = now_us() + 2e6;
	int n;

	do {
		n = ibv_poll_cq(s->cq, 1, wc);
	} while (n == 0 && now_us() < deadline);
	if (n < 0) {
		fprintf(stderr, "FAIL: %s: ibv_poll_cq failed\n", s->name);
		return -1;
	}
	if (n == 0) {
		fprintf(stderr, "FAIL: %s: no completion within 2 s\n", s->name);
		return -1;
	}
	if (wc->status != IBV_WC_SUCCESS || wc->opcode != want) {
		fprintf(stderr, "FAIL: %s: completion status %s, opcode %d\n", s->name,
			ibv_wc_status_str(wc->status), wc->opcode);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : NULL;
	int iters = argc > 2 ? atoi(argv[2]) : 200;
	struct ibv_device **list = NULL;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_port_attr pa;
	struct side s[2] = { { .name = "A" }, { .name = "B" } };
	struct ibv_wc wc;
	char gidtxt[INET6_ADDRSTRLEN];
	int n, i, gid_index = -1, ret = 1;
	double t0;

	if (iters <= 0)
		iters = 200;

	/* 1. Which devices exist? */
	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "FAIL: ibv_get_device_list: %s\n", strerror(errno));
		return 1;
	}
	for (i = 0; i < n; i++)
		if (!want || strcmp(ibv_get_device_name(list[i]), want) == 0)
			break;
	if (i == n) {
		fprintf(stderr, "FAIL: no RDMA device %s\n", want ? want : "");
		goto out;
	}

	/* 2. Open it: a context is our handle to the device (a file descriptor inside). */
	ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "FAIL: ibv_open_device: %s\n", strerror(errno));
		goto out;
	}
	if (ibv_query_port(ctx, PORT, &pa)) {
		fprintf(stderr, "FAIL: ibv_query_port: %s\n", strerror(errno));
		goto out;
	}
	/* Which GID to be addressed by. On RoCE the GID carries the IP address: take the
	 * first RoCE v2 GID with an IPv4 address (the lab: index 1, ::ffff:10.0.2.15),
	 * never a fixed index (slots move as addresses come and go). On InfiniBand the
	 * port GID, index 0; the LID routes inside the subnet. */
	if (argc > 3) {
		gid_index = atoi(argv[3]);
	} else if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		gid_index = 0;
	} else {
		static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		struct ibv_gid_entry e;

		for (i = 0; i < pa.gid_tbl_len && gid_index < 0; i++)
			if (ibv_query_gid_ex(ctx, PORT, i, &e, 0) == 0 &&
			    e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
			    memcmp(e.gid.raw, v4, sizeof(v4)) == 0)
				gid_index = i;
		if (gid_index < 0) {
			fprintf(stderr, "FAIL: no RoCE v2 GID with an IPv4 address\n");
			goto out;
		}
	}

	/* 3. A protection domain groups the objects that may be used together. */
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "FAIL: ibv_alloc_pd: %s\n", strerror(errno));
		goto out;
	}

	for (i = 0; i < 2; i++) {
		struct ibv_qp_init_attr init;

		/* 4. Memory the device may touch must be registered. One buffer per side:
		 * the first half to send from, the second to receive into, so a message
		 * arriving never overwrites one still being sent. */
		s[i].buf = calloc(2, MSG_SIZE);
		if (!s[i].buf) {
			fprintf(stderr, "FAIL: calloc\n");
			goto out;
		}
		s[i].mr = ibv_reg_mr(pd, s[i].buf, 2 * MSG_SIZE, IBV_ACCESS_LOCAL_WRITE);
		if (!s[i].mr) {
			fprintf(stderr, "FAIL: ibv_reg_mr: %s\n", strerror(errno));
			goto out;
		}
		/* 5. A completion queue: where finished work shows up. Both queues of the QP
		 * complete into it, so it holds as many entries as both can have posted:
		 * a full CQ is an overrun (IBV_EVENT_CQ_ERR), not back-pressure. */
		s[i].cq = ibv_create_cq(ctx, 2 * QUEUE_DEPTH, NULL, NULL, 0);
		if (!s[i].cq) {
			fprintf(stderr, "FAIL: ibv_create_cq: %s\n", strerror(errno));
			goto out;
		}
		/* 6. The queue pair: a send queue and a receive queue, reliable connected. */
		memset(&init, 0, sizeof(init));
		init.send_cq = s[i].cq;
		init.recv_cq = s[i].cq;
		init.qp_type = IBV_QPT_RC;
		init.cap.max_send_wr = QUEUE_DEPTH;
		init.cap.max_recv_wr = QUEUE_DEPTH;
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		s[i].qp = ibv_create_qp(pd, &init);
		if (!s[i].qp) {
			fprintf(stderr, "FAIL: ibv_create_qp: %s\n", strerror(errno));
			goto out;
		}
		/* 7. What we would send to the peer over TCP (or let librdmacm carry). */
		s[i].me.qpn = s[i].qp->qp_num;
		s[i].me.psn = random_psn(); /* fresh for every connection */
		s[i].me.lid = pa.lid; /* 0 on RoCE: Ethernet has no LIDs */
		if (ibv_query_gid(ctx, PORT, gid_index, &s[i].me.gid)) {
			fprintf(stderr, "FAIL: ibv_query_gid(%d): %s\n", gid_index,
				strerror(errno));
			goto out;
		}
	}
	inet_ntop(AF_INET6, s[0].me.gid.raw, gidtxt, sizeof(gidtxt));
	printf("device %s, gid[%d] %s, mtu enum %d\n", ibv_get_device_name(ctx->device),
	       gid_index, gidtxt, pa.active_mtu);
	printf("A: qpn 0x%06x psn 0x%06x   B: qpn 0x%06x psn 0x%06x\n", s[0].me.qpn,
	       s[0].me.psn, s[1].me.qpn, s[1].me.psn);

	/* 8. Each side connects to what the other side told it. */
	if (connect_qp(&s[0], &s[1].me, &pa, gid_index) ||
	    connect_qp(&s[1], &s[0].me, &pa, gid_index))
		goto out;
	printf("both QPs in RTS\n");

	/* 9. The receiver posts a buffer FIRST, then the sender sends. */
	if (post_recv(&s[1]))
		goto out;
	snprintf(s[0].buf, MSG_SIZE, "hello from QP 0x%06x", s[0].me.qpn);
	if (post_send(&s[0]) || wait_wc(&s[0], IBV_WC_SEND, &wc))
		goto out;
	printf("A: send completion: %s\n", ibv_wc_status_str(wc.status));
	if (wait_wc(&s[1], IBV_WC_RECV, &wc))
		goto out;
	printf("B: recv completion: %s, %u bytes: \"%s\"\n", ibv_wc_status_str(wc.status),
	       wc.byte_len, s[1].buf + MSG_SIZE);

	/* 10. Ping-pong: A sends, B answers, repeat. Both receive queues stay stocked. */
	if (post_recv(&s[0]) || post_recv(&s[1]))
		goto out;
	t0 = now_us();
	for (i = 0; i < iters; i++) {
		if (post_send(&s[0]) || wait_wc(&s[0], IBV_WC_SEND, &wc) ||
		    wait_wc(&s[1], IBV_WC_RECV, &wc) || post_recv(&s[1]) ||
		    post_send(&s[1]) || wait_wc(&s[1], IBV_WC_SEND, &wc) ||
		    wait_wc(&s[0], IBV_WC_RECV, &wc) || post_recv(&s[0]))
			goto out;
	}
	printf("ping-pong: %d round trips, %.1f us per round trip\n", iters,
	       (now_us() - t0) / iters);
	printf("OK\n");
	ret = 0;
out:
	/* 11. Teardown: children before parents. QPs, then MRs and CQs, then PD, context. */
	for (i = 0; i < 2; i++) {
		if (s[i].qp && ibv_destroy_qp(s[i].qp))
			ret = 1;
		if (s[i].mr && ibv_dereg_mr(s[i].mr))
			ret = 1;
		if (s[i].cq && ibv_destroy_cq(s[i].cq))
			ret = 1;
		free(s[i].buf);
	}
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	if (ctx && ibv_close_device(ctx))
		ret = 1;
	ibv_free_device_list(list);
	return ret;
}
