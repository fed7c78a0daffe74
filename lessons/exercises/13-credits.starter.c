/*
 * Exercise 13-credits (chapter 13): add credit-based flow control.
 *
 * B has room for 4 receives and A must send it 12 messages. The QPs are connected with
 * rnr_retry = 0: a SEND that finds no receive posted fails at once with
 * IBV_WC_RNR_RETRY_EXC_ERR. TODO: A may only send while it holds a credit (one per
 * receive B has posted); when it has none, B consumes its completions, posts the
 * receives again and returns that many credits.
 *
 * Checked on rxe0 by what it did: exit 0, at least 12 receives consumed (rdma_recvs), not
 * one RNR NAK (send_rnr_err, rcvd_rnr_err), every resource released.
 */
#include "lab_common.h"

#define SLOTS 4
#define MSGS 12
#define SZ 64

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_mr *smr = NULL, *rmr = NULL;
	struct ibv_wc wc;
	char *sbuf = NULL, *rbuf = NULL, want[SZ];
	int ret = 1, i, credits = 0, got = 0;

	(void)want;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL) || loop_connect(&l, 0, 0, 0))
		goto out;
	sbuf = calloc(1, SZ);
	rbuf = calloc(SLOTS, SZ);
	smr = sbuf ? ibv_reg_mr(l.pd, sbuf, SZ, 0) : NULL;
	rmr = smr && rbuf ? ibv_reg_mr(l.pd, rbuf, SLOTS * SZ, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr)
		goto out;
	for (i = 0; i < SLOTS; i++)
		if (post_recv_one(l.qp[1], rmr, rbuf + i * SZ, SZ, (uint64_t)i))
			goto out;
	credits = SLOTS; /* what B granted */
	for (i = 0; i < MSGS; i++) {
		/* TODO: what must happen when A has no credit left? */
		snprintf(sbuf, SZ, "message %d", i);
		if (post_one(l.qp[0], IBV_WR_SEND, smr, sbuf, SZ, 0, 0, (uint64_t)i))
			goto out;
		credits--;
		if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("A: SEND %d: %s", i, wc_status_name(wc.status));
			goto out;
		}
	}
	while (got < MSGS) {
		if (poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS)
			goto out;
		snprintf(want, sizeof(want), "message %d", got);
		if (strcmp(rbuf + wc.wr_id * SZ, want))
			goto out;
		got++;
	}
	printf("%d messages delivered in order, no RNR\n", got);
	ret = 0;
out:
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
