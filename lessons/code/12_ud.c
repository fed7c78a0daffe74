/*
 * 12_ud.c - chapter 12: Unreliable Datagram, address handles and the Q_Key.
 *
 * Two UD QPs on one device. A UD QP is never connected: every SEND names its
 * destination in the work request (an address handle, the remote QPN and the remote
 * Q_Key), and one QP can talk to any number of peers. The receiver's buffer must have
 * 40 spare bytes in front: UD receives start with the packet's GRH (on RoCE, from the
 * IP header). A message must fit in one packet (the path MTU), and nothing is
 * retransmitted or acknowledged.
 *
 *   1. A sends to B with B's Q_Key: B receives it, with the GRH and A's QPN as source;
 *   2. A sends with a wrong Q_Key: A's SEND completes (nobody acknowledges UD), B's
 *      responder drops the packet silently;
 *   3. A sends again with the right key: B's NEXT completion is message 3, so 2 is lost.
 *   4. a SEND larger than the MTU: per the spec no packet is sent and no error reported;
 *   5. B's next completion is message 5, so 4 never arrived.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 12_ud 12_ud.c -libverbs
 * Run:   ./12_ud [device]
 */
#include "lab_common.h"

#define QKEY 0x11111111u /* the high bit clear: a Q_Key with it set is for the kernel */
#define GRH 40
#define MSG 256
#define SLOT (GRH + 4096) /* a receive slot: room for any datagram up to 4 KiB */

static int ud_up(struct ibv_qp *qp, uint8_t port)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	a.qkey = QKEY; /* what a sender must present to reach this QP */
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (!rc) {
		a.qp_state = IBV_QPS_RTR; /* no peer, no path: nothing else to give */
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	}
	if (!rc) {
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = random_psn();
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (rc)
		FAIL("UD QP to RTS: %s", strerror(rc));
	return rc ? -1 : 0;
}

static int ud_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey,
		   struct ibv_mr *mr, char *buf, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr, *bad;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	rc = ibv_post_send(qp, &wr, &bad);
	return rc;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_port_attr pa;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq[2] = { NULL, NULL };
	struct ibv_qp *qp[2] = { NULL, NULL };
	struct ibv_ah *ah = NULL;
	struct ibv_mr *smr = NULL, *rmr = NULL;
	struct ibv_qp_init_attr init;
	struct ibv_ah_attr aa;
	struct conn_info self;
	struct ibv_wc wc;
	char *sbuf = NULL, *rbuf = NULL;
	const char *why = "";
	int gid_index, i, rc, ret = 1, big;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	if (ibv_query_port(ctx, 1, &pa) || pick_gid(ctx, 1, lab_netdev(), &gid_index, &self.gid))
		goto out;
	pd = ibv_alloc_pd(ctx);
	sbuf = calloc(1, 4096);
	rbuf = calloc(4, SLOT); /* four receive slots */
	smr = pd && sbuf ? ibv_reg_mr(pd, sbuf, 4096, 0) : NULL;
	rmr = smr && rbuf ? ibv_reg_mr(pd, rbuf, 4 * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr) {
		FAIL("PD/MRs: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < 2; i++) {
		cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		memset(&init, 0, sizeof(init));
		init.send_cq = cq[i];
		init.recv_cq = cq[i];
		init.qp_type = IBV_QPT_UD;
		init.cap.max_send_wr = 8;
		init.cap.max_recv_wr = 8;
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		qp[i] = cq[i] ? ibv_create_qp(pd, &init) : NULL;
		if (!qp[i] || ud_up(qp[i], 1)) {
			FAIL("UD QP %d: %s", i, strerror(errno));
			goto out;
		}
	}
	printf("UD QPs A 0x%06x and B 0x%06x, Q_Key 0x%08x, path MTU %d\n", qp[0]->qp_num,
	       qp[1]->qp_num, QKEY, 128 << pa.active_mtu);

	/* The address handle: the same address vector an RC QP gets at RTR, as an object. */
	self.lid = pa.lid;
	self.qpn = qp[1]->qp_num;
	if (ah_attr_for(&aa, pa.link_layer, 1, gid_index, &self.gid, &self, &why)) {
		FAIL("address vector: %s", why);
		goto out;
	}
	ah = ibv_create_ah(pd, &aa);
	if (!ah) {
		FAIL("ibv_create_ah: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < 4; i++)
		if (post_recv_one(qp[1], rmr, rbuf + i * SLOT, SLOT, 10 + i))
			goto out;

	for (i = 1; i <= 3; i++) {
		uint32_t key = i == 2 ? 0x22222222u : QKEY;

		snprintf(sbuf, MSG, "datagram %d", i);
		rc = ud_send(qp[0], ah, qp[1]->qp_num, key, smr, sbuf, MSG, i);
		if (rc || poll_wc(cq[0], &wc, 5000) != 1) {
			FAIL("send %d: %s", i, strerror(rc));
			goto out;
		}
		printf("%d. A sends \"%s\" with Q_Key 0x%08x: send completion %s\n", i, sbuf, key,
		       wc_status_name(wc.status));
		if (wc.status != IBV_WC_SUCCESS)
			goto out;
		if (i == 2)
			continue; /* B's answer comes with message 3 */
		if (poll_wc(cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("B received nothing for message %d", i);
			goto out;
		}
		{
			char *slot = rbuf + (wc.wr_id - 10) * SLOT;

			printf("   B receives \"%s\": %u bytes (%d GRH + %d), GRH %s, from QP 0x%06x\n",
			       slot + GRH, wc.byte_len, GRH, MSG,
			       wc.wc_flags & IBV_WC_GRH ? "present" : "absent", wc.src_qp);
			if (wc.src_qp != qp[0]->qp_num || wc.byte_len != GRH + MSG ||
			    !(wc.wc_flags & IBV_WC_GRH)) {
				FAIL("unexpected datagram");
				goto out;
			}
			snprintf(sbuf, MSG, "datagram %d", i);
			if (strcmp(slot + GRH, sbuf)) {
				FAIL("B's next datagram is not message %d: message 2 was not dropped?",
				     i);
				goto out;
			}
		}
	}
	printf("message 2 (wrong Q_Key) never reached B: dropped by its responder\n");

	/*
	 * One datagram, one packet. For a message larger than the port's MTU the spec
	 * (IBTA C10-93.1.1) says: emit no packet and report no error. So the SEND
	 * "succeeds" and nothing is sent; B's next datagram proves it.
	 */
	big = 2 * (128 << pa.active_mtu);
	rc = ud_send(qp[0], ah, qp[1]->qp_num, QKEY, smr, sbuf, (uint32_t)big, 4);
	if (rc) {
		printf("4. a %d-byte UD SEND (MTU %d): ibv_post_send refuses it: %s\n", big,
		       128 << pa.active_mtu, strerror(rc));
	} else {
		if (poll_wc(cq[0], &wc, 5000) != 1) {
			FAIL("no completion for the large datagram");
			goto out;
		}
		printf("4. A sends %d bytes (MTU %d): send completion %s\n", big,
		       128 << pa.active_mtu, wc_status_name(wc.status));
	}
	snprintf(sbuf, MSG, "datagram 5");
	if (ud_send(qp[0], ah, qp[1]->qp_num, QKEY, smr, sbuf, MSG, 5) ||
	    poll_wc(cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS ||
	    poll_wc(cq[1], &wc, 5000) != 1) {
		FAIL("datagram 5");
		goto out;
	}
	{
		char *slot = rbuf + (wc.wr_id - 10) * SLOT;

		printf("5. A sends \"datagram 5\"; B's next completion: %s, \"%s\"\n",
		       wc_status_name(wc.status), slot + GRH);
		if (wc.status != IBV_WC_SUCCESS || strcmp(slot + GRH, "datagram 5")) {
			FAIL("the large datagram reached B");
			goto out;
		}
	}
	printf("the %d-byte datagram never left A: no packet, no error\n", big);
	ret = 0;
out:
	if (ah && ibv_destroy_ah(ah))
		ret = 1;
	for (i = 0; i < 2; i++) {
		if (qp[i] && ibv_destroy_qp(qp[i]))
			ret = 1;
		if (cq[i] && ibv_destroy_cq(cq[i]))
			ret = 1;
	}
	if (smr && ibv_dereg_mr(smr))
		ret = 1;
	if (rmr && ibv_dereg_mr(rmr))
		ret = 1;
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	ibv_close_device(ctx);
	free(sbuf);
	free(rbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
