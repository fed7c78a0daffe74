/*
 * 12_fence_events.c - chapter 12: fences, solicited events and CQ moderation.
 *
 *   1. Fence: A READs B's buffer into L and then SENDs L to B. Without a fence the
 *      requester may take the SEND's payload from L before the READ's response has
 *      landed there (what arrives is a race); with IBV_SEND_FENCE on the SEND it waits
 *      until the READ is complete, and B receives the data it just had read from it.
 *   2. Solicited events: B's CQ is armed with ibv_req_notify_cq(cq, 1), "solicited
 *      only". Three plain SENDs complete at B without waking it; the fourth, posted
 *      with IBV_SEND_SOLICITED, raises the completion event. All four completions are
 *      then in the CQ.
 *   3. CQ moderation (ibv_modify_cq with a count and a period): one event per N
 *      completions or per period. The program asks and says whether the device does it.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 12_fence_events 12_fence_events.c -libverbs
 * Run:   ./12_fence_events [device]
 */
#include <poll.h>
#include "lab_common.h"

#define SZ 64
#define FRESH "fresh data, read from B"

static int send_flags(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int flags, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf, SZ, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = flags },
			   *bad;

	return ibv_post_send(qp, &wr, &bad);
}

/* A READs B's buffer into L, then SENDs L (with `fence`); returns what B received in *got. */
static int read_then_send(struct loop *l, struct ibv_mr *lmr, char *lbuf, struct ibv_mr *bmr,
			  char *bbuf, struct ibv_mr *rmr, char *rbuf, int fence)
{
	struct ibv_sge sge = { (uintptr_t)lbuf, SZ, lmr->lkey };
	struct ibv_send_wr rd = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct ibv_wc wc;
	int i;

	snprintf(lbuf, SZ, "stale: L before the READ");
	memset(rbuf, 0, SZ);
	rd.wr.rdma.remote_addr = (uintptr_t)bbuf;
	rd.wr.rdma.rkey = bmr->rkey;
	if (post_recv_one(l->qp[1], rmr, rbuf, SZ, 9) || ibv_post_send(l->qp[0], &rd, &bad) ||
	    send_flags(l->qp[0], lmr, lbuf, IBV_SEND_SIGNALED | (fence ? IBV_SEND_FENCE : 0), 2))
		return -1;
	for (i = 0; i < 2; i++)
		if (poll_wc(l->cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS)
			return -1;
	if (poll_wc(l->cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *bcq = NULL, *ev_cq;
	struct ibv_qp_init_attr init;
	struct ibv_modify_cq_attr mod;
	struct loop l;
	struct ibv_mr *lmr = NULL, *bmr = NULL, *rmr = NULL;
	struct ibv_wc wc[8];
	struct pollfd p;
	char *lbuf = NULL, *bbuf = NULL, *rbuf = NULL;
	void *ctx_out;
	int ret = 1, i, n, rc, total;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	lbuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	rbuf = calloc(1, SZ);
	lmr = lbuf ? ibv_reg_mr(l.pd, lbuf, SZ, IBV_ACCESS_LOCAL_WRITE) : NULL;
	bmr = lmr && bbuf ? ibv_reg_mr(l.pd, bbuf, SZ, IBV_ACCESS_REMOTE_READ) : NULL;
	rmr = bmr && rbuf ? ibv_reg_mr(l.pd, rbuf, SZ, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr || loop_connect(&l, 0, IBV_ACCESS_REMOTE_READ, LAB_RNR_RETRY))
		goto out;
	snprintf(bbuf, SZ, FRESH);

	/* 1. READ then SEND of the READ's target, without and with a fence. */
	if (read_then_send(&l, lmr, lbuf, bmr, bbuf, rmr, rbuf, 0))
		goto out;
	printf("1. READ then SEND, no fence:   B received \"%s\" (a race: either may come)\n",
	       rbuf);
	if (read_then_send(&l, lmr, lbuf, bmr, bbuf, rmr, rbuf, 1))
		goto out;
	printf("   READ then SEND, with fence: B received \"%s\"\n", rbuf);
	if (strcmp(rbuf, FRESH)) {
		FAIL("the fenced SEND went before the READ completed");
		goto out;
	}

	/* 2. Solicited events: rebuild B on a CQ with a completion channel. */
	ch = ibv_create_comp_channel(l.ctx);
	bcq = ch ? ibv_create_cq(l.ctx, 16, NULL, ch, 0) : NULL;
	if (!bcq || ibv_destroy_qp(l.qp[1])) {
		FAIL("channel/CQ: %s", strerror(errno));
		goto out;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = bcq;
	init.recv_cq = bcq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	l.qp[1] = ibv_create_qp(l.pd, &init);
	if (!l.qp[1] || loop_connect(&l, 0, 0, LAB_RNR_RETRY))
		goto out;
	for (i = 0; i < 4; i++)
		if (post_recv_one(l.qp[1], rmr, rbuf, SZ, 20 + i))
			goto out;
	if (ibv_req_notify_cq(bcq, 1)) { /* 1: wake only for a solicited completion */
		FAIL("ibv_req_notify_cq");
		goto out;
	}
	p.fd = ch->fd;
	p.events = POLLIN;
	for (i = 1; i <= 4; i++) {
		int solicited = i == 4;

		snprintf(lbuf, SZ, "message %d", i);
		if (send_flags(l.qp[0], lmr, lbuf,
			       IBV_SEND_SIGNALED | (solicited ? IBV_SEND_SOLICITED : 0), i) ||
		    poll_wc(l.cq[0], wc, 5000) != 1 || wc[0].status != IBV_WC_SUCCESS)
			goto out;
		/* A's SEND is acknowledged, so B's completion exists: did it wake B? */
		rc = poll(&p, 1, solicited ? 5000 : 200);
		printf("2. SEND %d%s: completion event at B: %s\n", i,
		       solicited ? " with IBV_SEND_SOLICITED" : "", rc == 1 ? "yes" : "no");
		if (rc != (solicited ? 1 : 0)) {
			FAIL("wrong wake-up for SEND %d", i);
			goto out;
		}
	}
	if (ibv_get_cq_event(ch, &ev_cq, &ctx_out) || ev_cq != bcq) {
		FAIL("ibv_get_cq_event");
		goto out;
	}
	ibv_ack_cq_events(bcq, 1);
	total = 0;
	while ((n = ibv_poll_cq(bcq, 8, wc)) > 0)
		total += n;
	printf("   one event, then %d completions in B's CQ\n", total);
	if (total != 4)
		goto out;

	/* 3. CQ moderation. */
	memset(&mod, 0, sizeof(mod));
	mod.attr_mask = IBV_CQ_ATTR_MODERATE;
	mod.moderate.cq_count = 16;
	mod.moderate.cq_period = 100; /* microseconds */
	rc = ibv_modify_cq(bcq, &mod);
	if (rc == 0)
		printf("3. CQ moderation (16 completions or 100 us per event): supported by %s\n",
		       ibv_get_device_name(l.ctx->device));
	else if (rc == EOPNOTSUPP || rc == ENOSYS)
		printf("3. CQ moderation (ibv_modify_cq): not supported by %s: %s\n",
		       ibv_get_device_name(l.ctx->device), strerror(rc));
	else {
		FAIL("ibv_modify_cq: %s", strerror(rc));
		goto out;
	}
	ret = 0;
out:
	if (l.qp[1] && ibv_destroy_qp(l.qp[1]))
		ret = 1;
	l.qp[1] = NULL;
	if (bcq && ibv_destroy_cq(bcq))
		ret = 1;
	if (ch && ibv_destroy_comp_channel(ch))
		ret = 1;
	if (lmr && ibv_dereg_mr(lmr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	if (rmr && ibv_dereg_mr(rmr))
		ret = 1;
	loop_close(&l);
	free(lbuf);
	free(bbuf);
	free(rbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
