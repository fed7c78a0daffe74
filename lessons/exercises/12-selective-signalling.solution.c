/*
 * Exercise 12-selective-signalling (chapter 12): add selective signalling.
 *
 * A's QP is created with sq_sig_all = 0, so a send WR produces a completion only when
 * it is posted with IBV_SEND_SIGNALED, and only a completion retires the WRs before
 * it. The program posts 64 RDMA WRITEs on a send queue of 16 and must finish with
 * exactly 4 completions. TODO: signal the right WRs and wait at the right time.
 *
 * Checked on rxe0 by what it did: exit 0, at least 64 packets sent (sent_pkts), no SEND,
 * no retry, every resource released.
 */
#include "lab_common.h"

#define N 64
#define DEPTH 16
#define SZ 64

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr init;
	struct loop l;
	struct ibv_mr *amr = NULL, *bmr = NULL;
	struct ibv_wc wc;
	char *abuf = NULL, *bbuf = NULL;
	int ret = 1, i, rc, completions = 0;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	memset(&init, 0, sizeof(init));
	init.send_cq = l.cq[0];
	init.recv_cq = l.cq[0];
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 0;
	init.cap.max_send_wr = DEPTH;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (ibv_destroy_qp(l.qp[0])) {
		l.qp[0] = NULL;
		goto out;
	}
	l.qp[0] = ibv_create_qp(l.pd, &init);
	if (!l.qp[0] || loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		goto out;
	abuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	amr = abuf ? ibv_reg_mr(l.pd, abuf, SZ, 0) : NULL;
	bmr = amr && bbuf ? ibv_reg_mr(l.pd, bbuf, SZ,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) :
			    NULL;
	if (!bmr)
		goto out;
	for (i = 1; i <= N; i++) {
		struct ibv_sge sge = { (uintptr_t)abuf, SZ, amr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE }, *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)bbuf;
		wr.wr.rdma.rkey = bmr->rkey;
		/* Signal the last WR of each group of DEPTH: its completion frees the queue. */
		if (i % DEPTH == 0)
			wr.send_flags = IBV_SEND_SIGNALED;
		rc = ibv_post_send(l.qp[0], &wr, &bad);
		if (rc) {
			FAIL("ibv_post_send %d: %s (is the send queue full?)", i, strerror(rc));
			goto out;
		}
		if (i % DEPTH == 0) {
			if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
				FAIL("no completion for WRITE %d", i);
				goto out;
			}
			completions++;
		}
	}
	if (poll_wc(l.cq[0], &wc, 200) != 0) {
		FAIL("an extra completion");
		goto out;
	}
	printf("%d WRITEs, %d completions\n", N, completions);
	if (completions == N / DEPTH)
		ret = 0;
out:
	if (amr && ibv_dereg_mr(amr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	loop_close(&l);
	free(abuf);
	free(bbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
