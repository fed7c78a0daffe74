/*
 * 04_qp_states.c - chapter 4: the queue pair state machine.
 *
 * Creates one RC QP and walks it RESET -> INIT -> RTR -> RTS, printing the state the
 * device reports after each step and which attributes each step needed. On the way it
 * tries three things the verbs layer must refuse, and prints the errno:
 *   - skipping a state (RESET -> RTR),
 *   - leaving out a required attribute (INIT -> RTR without the address vector),
 *   - going backwards (RTS -> INIT).
 * Finally: any state -> ERR, and ERR -> RESET, the way back to a reusable QP.
 *
 * The QP is connected to itself (dest QPN = its own QPN): enough to reach RTS.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 04_qp_states 04_qp_states.c -libverbs
 * Run:   ./04_qp_states [device]
 */
#include "lab_common.h"

static struct ibv_qp *qp;
static int failures;

/* Modify and report. `expect_ok` says whether the verbs layer should accept it. */
static void step(const char *what, struct ibv_qp_attr *a, int mask, int expect_ok)
{
	double t0 = now_us();
	int rc = ibv_modify_qp(qp, a, mask);
	double dt = now_us() - t0;
	int err = rc < 0 ? errno : rc;
	int st = qp_state(qp);

	if (rc == 0)
		printf("%-44s ok       (%6.1f us) -> state %s\n", what, dt,
		       st < 0 ? "?" : qp_state_name(st));
	else
		printf("%-44s rejected: %s (errno %d), state stays %s\n", what, strerror(err),
		       err, st < 0 ? "?" : qp_state_name(st));
	if ((rc == 0) != expect_ok) {
		FAIL("%s: expected %s", what, expect_ok ? "success" : "an error");
		failures++;
	}
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_qp_init_attr init;
	struct ibv_port_attr pa;
	struct ibv_qp_attr init_a, rtr, rts, a;
	union ibv_gid gid;
	struct conn_info self;
	const char *why = "";
	int gid_index, ret = 1, st;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	if (ibv_query_port(ctx, 1, &pa) || pick_gid(ctx, 1, lab_netdev(), &gid_index, &gid)) {
		FAIL("query port 1");
		goto out;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq) {
		FAIL("alloc PD / create CQ: %s", strerror(errno));
		goto out;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 8;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &init);
	if (!qp) {
		FAIL("ibv_create_qp: %s", strerror(errno));
		goto out;
	}
	st = qp_state(qp);
	printf("device %s: created RC QP 0x%06x, state %s, gid index %d\n",
	       ibv_get_device_name(ctx->device), qp->qp_num, st < 0 ? "?" : qp_state_name(st),
	       gid_index);

	/* INIT needs: partition key index, port, what remote peers may do. */
	memset(&init_a, 0, sizeof(init_a));
	init_a.qp_state = IBV_QPS_INIT;
	init_a.pkey_index = 0;
	init_a.port_num = 1;
	init_a.qp_access_flags = 0; /* this QP carries no data: it grants the peer nothing */

	/* RTR needs: the path (address vector), MTU, remote QPN, its first PSN, how many
	 * RDMA READs/atomics it may have in flight toward us, and the RNR NAK delay. */
	memset(&rtr, 0, sizeof(rtr));
	rtr.qp_state = IBV_QPS_RTR;
	rtr.path_mtu = pa.active_mtu;
	rtr.dest_qp_num = qp->qp_num;
	rtr.max_dest_rd_atomic = 1;
	rtr.min_rnr_timer = 12;
	/* The QP is connected to itself: the "peer" is this port, this QP. */
	self.qpn = qp->qp_num;
	self.psn = random_psn();
	self.lid = pa.lid;
	self.gid = gid;
	rtr.rq_psn = self.psn;
	if (ah_attr_for(&rtr.ah_attr, pa.link_layer, 1, gid_index, &gid, &self, &why)) {
		FAIL("address vector: %s", why);
		goto out;
	}
	const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

	/* RTS needs: our first PSN, ACK timeout, retry counts, READs/atomics we may issue. */
	memset(&rts, 0, sizeof(rts));
	rts.qp_state = IBV_QPS_RTS;
	rts.sq_psn = self.psn;
	rts.timeout = 14;
	rts.retry_cnt = 7;
	rts.rnr_retry = 6;
	rts.max_rd_atomic = 1;
	const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

	step("RESET -> RTR (skipping INIT)", &rtr, rtr_mask, 0);
	step("RESET -> INIT without IBV_QP_PORT", &init_a,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS, 0);
	step("RESET -> INIT", &init_a,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 1);
	step("INIT -> RTR without IBV_QP_AV", &rtr, rtr_mask & ~IBV_QP_AV, 0);
	step("INIT -> RTR", &rtr, rtr_mask, 1);
	step("RTR -> RTS", &rts, rts_mask, 1);
	step("RTS -> INIT (backwards)", &init_a,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	step("RTS -> ERR", &a, IBV_QP_STATE, 1);
	a.qp_state = IBV_QPS_RESET;
	step("ERR -> RESET", &a, IBV_QP_STATE, 1);

	if (failures == 0) {
		printf("OK\n");
		ret = 0;
	}
out:
	if (qp && ibv_destroy_qp(qp))
		ret = 1;
	if (cq && ibv_destroy_cq(cq))
		ret = 1;
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	if (ibv_close_device(ctx))
		ret = 1;
	return ret;
}
