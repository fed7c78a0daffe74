/*
 * Exercise 12-srq (chapter 12): add a shared receive queue.
 *
 * The program creates an SRQ, posts its receives there (ibv_post_srq_recv), and A sends
 * N messages to B with rnr_retry 0: a SEND that finds no receive fails at once with
 * IBV_WC_RNR_RETRY_EXC_ERR. B's QP must take its receives from the SRQ.
 * TODO: create B's QP so that it does.
 *
 * Checked on rxe0 by what it did: exit 0, at least 8 receives consumed (rdma_recvs), no
 * RNR NAK sent (send_rnr_err), every resource released.
 */
#include "lab_common.h"

#define N 8
#define SZ 64

int main(int argc, char **argv)
{
	struct ibv_srq_init_attr sattr;
	struct ibv_qp_init_attr init;
	struct ibv_srq *srq = NULL;
	struct loop l;
	struct ibv_mr *smr = NULL, *rmr = NULL;
	struct ibv_wc wc = { 0 };
	char *sbuf = NULL, *rbuf = NULL;
	int ret = 1, i, got = 0;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	memset(&sattr, 0, sizeof(sattr));
	sattr.attr.max_wr = 2 * N;
	sattr.attr.max_sge = 1;
	srq = ibv_create_srq(l.pd, &sattr);
	if (!srq) {
		FAIL("ibv_create_srq: %s", strerror(errno));
		goto out;
	}
	/* B's QP again, receiving from the SRQ. */
	if (ibv_destroy_qp(l.qp[1])) {
		l.qp[1] = NULL;
		goto out;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = l.cq[1];
	init.recv_cq = l.cq[1];
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	/* The QP's receive queue is the SRQ: its own cap.max_recv_wr is ignored. */
	init.srq = srq;
	l.qp[1] = ibv_create_qp(l.pd, &init);
	if (!l.qp[1] || loop_connect(&l, 0, 0, 0))
		goto out;
	sbuf = calloc(N, SZ);
	rbuf = calloc(N, SZ);
	smr = sbuf ? ibv_reg_mr(l.pd, sbuf, N * SZ, 0) : NULL;
	rmr = smr && rbuf ? ibv_reg_mr(l.pd, rbuf, N * SZ, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr)
		goto out;
	for (i = 0; i < N; i++) {
		struct ibv_sge sge = { (uintptr_t)(rbuf + i * SZ), SZ, rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;

		if (ibv_post_srq_recv(srq, &wr, &bad)) {
			FAIL("ibv_post_srq_recv %d", i);
			goto out;
		}
	}
	for (i = 0; i < N; i++) {
		char *msg = sbuf + i * SZ;

		snprintf(msg, SZ, "message %d", i + 1);
		if (post_one(l.qp[0], IBV_WR_SEND, smr, msg, SZ, 0, 0, (uint64_t)i))
			goto out;
		if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("SEND %d: %s: did B's QP take its receives from the SRQ?", i + 1,
			     wc_status_name(wc.status));
			goto out;
		}
		if (poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS ||
		    wc.qp_num != l.qp[1]->qp_num) {
			FAIL("B: no receive for message %d", i + 1);
			goto out;
		}
		if (strcmp(rbuf + wc.wr_id * SZ, msg) == 0)
			got++;
	}
	printf("%d messages received through the SRQ\n", got);
	if (got == N)
		ret = 0;
out:
	/* The QP before the SRQ it uses, both before the PD (loop_close). */
	if (l.qp[1] && ibv_destroy_qp(l.qp[1]))
		ret = 1;
	l.qp[1] = NULL;
	if (srq && ibv_destroy_srq(srq))
		ret = 1;
	if (smr && ibv_dereg_mr(smr))
		ret = 1;
	if (rmr && ibv_dereg_mr(rmr))
		ret = 1;
	loop_close(&l);
	free(sbuf);
	free(rbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
