/*
 * 12_mcast.c - chapter 12: UD multicast with rdma_join_multicast().
 *
 * A multicast group is a GID (on RoCE v2 with IPv4: ::ffff:239.x.y.z); a UD QP attached
 * to it receives every datagram sent to the group, and a sender reaches all of them with
 * one SEND to the group's address handle, remote QPN 0xFFFFFF and the group's Q_Key.
 * rdma_join_multicast() does the work: it joins the group (on RoCE an IGMP join on the
 * interface), attaches the QP (ibv_attach_mcast) and hands back, in the MULTICAST_JOIN
 * event, the address vector and Q_Key to send with.
 *
 * Two ids on the device, each with its own UD QP, both join the group; the sender posts
 * MSGS datagrams to the group and each QP counts what it receives.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 12_mcast 12_mcast.c -libverbs -lrdmacm
 * Run:   ./12_mcast [device] [group]     (group default 239.1.2.3)
 */
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

#define MSGS 4
#define GRH 40
#define MSG 64
#define SLOT (GRH + MSG)

struct member {
	const char *name;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf; /* MSGS receive slots, then one send buffer */
	struct ibv_ah *ah;
	uint32_t qkey, qpn;
	int joined;
};

static int next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		      struct rdma_ud_param *ud)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;
	int status;

	if (rdma_get_cm_event(ch, &ev)) {
		FAIL("rdma_get_cm_event: %s", strerror(errno));
		return -1;
	}
	got = ev->event;
	status = ev->status;
	if (ud && got == want)
		*ud = ev->param.ud;
	if (rdma_ack_cm_event(ev)) {
		FAIL("rdma_ack_cm_event");
		return -1;
	}
	if (got != want) {
		FAIL("expected %s, got %s (status %d)", rdma_event_str(want), rdma_event_str(got),
		     status);
		return -1;
	}
	return 0;
}

/* Resolve (binds the id to the device), UD QP, receives posted, join, AH from the event. */
static int member_up(struct rdma_event_channel *ch, struct member *m, struct sockaddr_in *src,
		     struct sockaddr_in *group)
{
	struct ibv_qp_init_attr init;
	struct rdma_ud_param ud;
	char gid[INET6_ADDRSTRLEN];
	int i;

	if (rdma_create_id(ch, &m->id, m, RDMA_PS_UDP) ||
	    rdma_resolve_addr(m->id, (struct sockaddr *)src, (struct sockaddr *)group, 2000) ||
	    next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL)) {
		FAIL("%s: resolve %s: %s", m->name, inet_ntoa(group->sin_addr), strerror(errno));
		return -1;
	}
	m->pd = ibv_alloc_pd(m->id->verbs);
	m->cq = m->pd ? ibv_create_cq(m->id->verbs, 2 * MSGS, NULL, NULL, 0) : NULL;
	m->buf = m->cq ? calloc(MSGS + 1, SLOT) : NULL;
	m->mr = m->buf ? ibv_reg_mr(m->pd, m->buf, (MSGS + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE)
		       : NULL;
	if (!m->mr) {
		FAIL("%s: PD/CQ/MR: %s", m->name, strerror(errno));
		return -1;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = m->cq;
	init.recv_cq = m->cq;
	init.qp_type = IBV_QPT_UD;
	init.cap.max_send_wr = MSGS;
	init.cap.max_recv_wr = MSGS;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (rdma_create_qp(m->id, m->pd, &init)) {
		FAIL("%s: rdma_create_qp: %s", m->name, strerror(errno));
		return -1;
	}
	for (i = 0; i < MSGS; i++)
		if (post_recv_one(m->id->qp, m->mr, m->buf + i * SLOT, SLOT, (uint64_t)i))
			return -1;
	if (rdma_join_multicast(m->id, (struct sockaddr *)group, m)) {
		FAIL("%s: rdma_join_multicast: %s", m->name, strerror(errno));
		return -1;
	}
	if (next_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN, &ud))
		return -1;
	m->joined = 1;
	m->qkey = ud.qkey;
	m->qpn = ud.qp_num;
	m->ah = ibv_create_ah(m->pd, &ud.ah_attr);
	if (!m->ah) {
		FAIL("%s: ibv_create_ah: %s", m->name, strerror(errno));
		return -1;
	}
	inet_ntop(AF_INET6, ud.ah_attr.grh.dgid.raw, gid, sizeof(gid));
	printf("%s: QP 0x%06x joined %s: group GID %s, remote QPN 0x%06x, Q_Key 0x%08x\n",
	       m->name, m->id->qp->qp_num, inet_ntoa(group->sin_addr), gid, m->qpn, m->qkey);
	return 0;
}

static int member_free(struct member *m, struct sockaddr_in *group)
{
	int bad = 0;

	if (m->ah && ibv_destroy_ah(m->ah))
		bad = 1;
	if (m->joined && rdma_leave_multicast(m->id, (struct sockaddr *)group))
		bad = 1;
	if (m->id && m->id->qp)
		rdma_destroy_qp(m->id);
	if (m->mr && ibv_dereg_mr(m->mr))
		bad = 1;
	if (m->cq && ibv_destroy_cq(m->cq))
		bad = 1;
	if (m->pd && ibv_dealloc_pd(m->pd))
		bad = 1;
	if (m->id && rdma_destroy_id(m->id))
		bad = 1;
	free(m->buf);
	return bad ? -1 : 0;
}

/* Completions on `m`'s CQ until `timeout_ms` passes with none: receives counted. */
static int count_receives(struct member *m, int timeout_ms, int *sends)
{
	struct ibv_wc wc;
	int got = 0;

	while (poll_wc(m->cq, &wc, timeout_ms) == 1) {
		if (wc.status != IBV_WC_SUCCESS) {
			FAIL("%s: completion %s", m->name, ibv_wc_status_str(wc.status));
			return -1;
		}
		if (wc.opcode == IBV_WC_SEND) {
			(*sends)++;
			continue;
		}
		printf("%s: received %u bytes (%u of GRH) from QPN 0x%06x: \"%s\"\n", m->name,
		       wc.byte_len, GRH, wc.src_qp, m->buf + wc.wr_id * SLOT + GRH);
		got++;
	}
	return got;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct member rx = { .name = "receiver" }, tx = { .name = "sender" };
	struct sockaddr_in src, group;
	struct ibv_context *ctx;
	union ibv_gid gid;
	int gid_index, rc, i, sends = 0, got_rx, got_tx = 0, ret = 1;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	rc = pick_gid(ctx, 1, lab_netdev(), &gid_index, &gid);
	if (ibv_close_device(ctx) || rc)
		return 1;
	memset(&src, 0, sizeof(src));
	src.sin_family = AF_INET;
	memcpy(&src.sin_addr, &gid.raw[12], 4);
	memset(&group, 0, sizeof(group));
	group.sin_family = AF_INET;
	if (inet_pton(AF_INET, argc > 2 ? argv[2] : "239.1.2.3", &group.sin_addr) != 1 ||
	    !IN_MULTICAST(ntohl(group.sin_addr.s_addr))) {
		FAIL("%s is not an IPv4 multicast address", argc > 2 ? argv[2] : "");
		return 1;
	}
	printf("local address %s\n", inet_ntoa(src.sin_addr));
	alarm(60);
	ch = rdma_create_event_channel();
	if (!ch) {
		FAIL("rdma_create_event_channel: %s", strerror(errno));
		return 1;
	}
	if (member_up(ch, &rx, &src, &group) || member_up(ch, &tx, &src, &group))
		goto out;
	for (i = 0; i < MSGS; i++) {
		char *p = tx.buf + MSGS * SLOT;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = MSG, .lkey = tx.mr->lkey };
		struct ibv_send_wr wr, *bad;

		snprintf(p, MSG, "datagram %d to the group", i + 1);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 100 + i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.ud.ah = tx.ah;
		wr.wr.ud.remote_qpn = tx.qpn; /* 0xFFFFFF: every QP attached to the group */
		wr.wr.ud.remote_qkey = tx.qkey;
		/* ibv_post_send returns the error number itself; errno is not set. */
		rc = ibv_post_send(tx.id->qp, &wr, &bad);
		if (rc) {
			FAIL("ibv_post_send: %s", strerror(rc));
			goto out;
		}
		/* One at a time: the send buffer is reused. */
		rc = count_receives(&tx, 200, &sends);
		if (rc < 0)
			goto out;
		got_tx += rc;
	}
	got_rx = count_receives(&rx, 2000, &sends);
	rc = count_receives(&tx, 200, &sends);
	got_tx = rc < 0 ? -1 : got_tx + rc;
	printf("sender: %d SENDs completed; receiver got %d of %d, sender's own QP got %d\n",
	       sends, got_rx, MSGS, got_tx);
	/* UD is unreliable, but on one device nothing is lost: every datagram must arrive. */
	if (sends != MSGS || got_rx != MSGS || got_tx < 0) {
		FAIL("the receiver got %d of %d datagrams", got_rx, MSGS);
		goto out;
	}
	ret = 0;
out:
	/* Both members, always: `a || b` would skip rx's teardown when tx's fails. */
	if (member_free(&tx, &group))
		ret = 1;
	if (member_free(&rx, &group))
		ret = 1;
	rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
