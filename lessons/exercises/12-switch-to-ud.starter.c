/*
 * Exercise 12-switch-to-ud (chapter 12): switch a connected program to UD.
 *
 * The program replaces the loop's two RC QPs with UD QPs and sends N messages from A to
 * B. A UD QP is never connected: it goes to INIT with a Q_Key, then to RTR and RTS with
 * no peer at all, and every SEND names its destination (an address handle, the remote
 * QPN and the remote Q_Key). B's receive slots keep 40 bytes in front for the GRH.
 * TODO: bring the QPs up the UD way, and address each SEND.
 *
 * Checked on rxe0 by what it did: exit 0, at least 8 SENDs sent and 8 receives consumed
 * (rdma_sends, rdma_recvs), every resource released.
 */
#include "lab_common.h"

#define N 8
#define QKEY 0x11111111u
#define GRH 40
#define SZ 64
#define SLOT (GRH + SZ)

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr init;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah = NULL;
	struct conn_info peer;
	struct loop l;
	struct ibv_mr *smr = NULL, *rmr = NULL;
	struct ibv_wc wc = { 0 };
	char *sbuf = NULL, *rbuf = NULL;
	const char *why = "";
	int ret = 1, i, got = 0;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	for (i = 0; i < 2; i++) {
		if (ibv_destroy_qp(l.qp[i])) {
			l.qp[i] = NULL;
			goto out;
		}
		memset(&init, 0, sizeof(init));
		init.send_cq = l.cq[i];
		init.recv_cq = l.cq[i];
		init.qp_type = IBV_QPT_UD;
		init.sq_sig_all = 1;
		init.cap.max_send_wr = N;
		init.cap.max_recv_wr = N;
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		l.qp[i] = ibv_create_qp(l.pd, &init);
		if (!l.qp[i]) {
			FAIL("ibv_create_qp(UD): %s", strerror(errno));
			goto out;
		}
	}
	/* TODO: this is how RC QPs are connected; UD QPs are brought up differently. */
	if (loop_connect(&l, 0, 0, LAB_RNR_RETRY))
		goto out;
	/* B's address: the same address vector an RC QP would get at RTR, as an object. */
	peer = loop_info(&l, 1);
	if (ah_attr_for(&aa, l.pa.link_layer, l.port, l.gid_index, &l.gid, &peer, &why)) {
		FAIL("address vector: %s", why);
		goto out;
	}
	ah = ibv_create_ah(l.pd, &aa);
	if (!ah) {
		FAIL("ibv_create_ah: %s", strerror(errno));
		goto out;
	}
	sbuf = calloc(N, SZ);
	rbuf = calloc(N, SLOT);
	smr = sbuf ? ibv_reg_mr(l.pd, sbuf, N * SZ, 0) : NULL;
	rmr = smr && rbuf ? ibv_reg_mr(l.pd, rbuf, N * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr)
		goto out;
	for (i = 0; i < N; i++)
		if (post_recv_one(l.qp[1], rmr, rbuf + i * SLOT, SLOT, (uint64_t)i))
			goto out;
	for (i = 0; i < N; i++) {
		char *msg = sbuf + i * SZ;
		struct ibv_sge sge = { (uintptr_t)msg, SZ, smr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bad;

		snprintf(msg, SZ, "datagram %d", i + 1);
		/* TODO: a UD SEND names its destination. */
		if (ibv_post_send(l.qp[0], &wr, &bad)) {
			FAIL("ibv_post_send %d: %s", i + 1, strerror(errno));
			goto out;
		}
		if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("SEND %d did not complete", i + 1);
			goto out;
		}
		if (poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("datagram %d never reached B", i + 1);
			goto out;
		}
		if (strcmp(rbuf + wc.wr_id * SLOT + GRH, msg) == 0 && wc.src_qp == l.qp[0]->qp_num)
			got++;
	}
	printf("%d datagrams from A reached B\n", got);
	if (got == N)
		ret = 0;
out:
	if (ah && ibv_destroy_ah(ah))
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
