/*
 * 08_dead_peer.c - chapter 8: an idle RC connection does not notice that its peer died.
 *
 * A and B are connected with timeout 14 (67 ms) and retry_cnt 6, not the 7 of the other
 * examples: rxe treats retry_cnt 7 as "retry forever" (rxe_comp.c decrements the count
 * only when it is not 7), so with 7 a keepalive to a dead peer never completes there.
 * On hardware 7 means seven retransmissions. B's QP is destroyed, as the kernel does
 * when B's process or host dies: no packet tells A. Then:
 *   1. A stays idle for IDLE_MS: no completion, no event, A's QP still reads RTS. The
 *      QP's timeout and retry_cnt only act on work requests that are outstanding.
 *   2. A posts a keepalive: a zero-length RDMA WRITE. It needs no memory, no rkey and no
 *      receive at the peer (a zero-length WRITE checks neither address nor key), so it
 *      costs a live peer nothing but an ACK. To the dead peer it is retried retry_cnt
 *      times and fails with IBV_WC_RETRY_EXC_ERR: the only way A learns it.
 * Before that, the same keepalive to the live B completes with success and gives B no
 * completion at all.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 08_dead_peer 08_dead_peer.c -libverbs
 * Run:   ./08_dead_peer [device] [idle-ms]
 */
#include "lab_common.h"

/* A zero-length RDMA WRITE: no SGE, no remote address, no rkey. */
static int post_keepalive(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_send_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.num_sge = 0;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		FAIL("ibv_post_send(keepalive): %s", strerror(rc));
	return rc;
}

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_wc wc;
	int idle_ms = argc > 2 ? atoi(argv[2]) : 3000;
	double t0;
	int n, ret = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	/* A finite retry count on every device, rxe included. */
	l.retry_cnt = 6;
	/* B lets A WRITE (the keepalive); A grants nothing. */
	if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		goto out;
	printf("connected: timeout 14 (67 ms), retry_cnt %d\n", l.retry_cnt);

	/* 0. The keepalive against a live peer. */
	if (post_keepalive(l.qp[0], 1) || poll_wc(l.cq[0], &wc, 5000) != 1)
		goto out;
	n = poll_wc(l.cq[1], &wc, 200) == 1;
	printf("0. keepalive to live B: %s; completions at B: %d\n",
	       wc_status_name(wc.status), n);

	/* B dies: its QP is gone, nobody tells A. */
	if (ibv_destroy_qp(l.qp[1])) {
		FAIL("ibv_destroy_qp(B): %s", strerror(errno));
		goto out;
	}
	l.qp[1] = NULL;
	printf("B's QP destroyed (its process died)\n");

	/* 1. Idle: nothing happens. */
	n = poll_wc(l.cq[0], &wc, idle_ms);
	printf("1. A idle for %d ms: completions %d, A's QP state %s\n", idle_ms, n,
	       qp_state_name(qp_state(l.qp[0])));

	/* 2. The keepalive finds out. */
	t0 = now_us();
	if (post_keepalive(l.qp[0], 2))
		goto out;
	n = poll_wc(l.cq[0], &wc, 30000);
	if (n != 1) {
		FAIL("no completion for the keepalive within 30 s");
		goto out;
	}
	printf("2. keepalive to dead B: %s after %.0f ms (bound: 7 x 67 ms plus the device's "
	       "timer granularity); A's QP state %s\n",
	       wc_status_name(wc.status), (now_us() - t0) / 1000.0,
	       qp_state_name(qp_state(l.qp[0])));
	if (wc.status != IBV_WC_RETRY_EXC_ERR)
		goto out;
	ret = 0;
	printf("OK\n");
out:
	loop_close(&l);
	return ret;
}
