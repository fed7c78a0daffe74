/*
 * 17_triage.c - chapter 17: "it does not connect", one cause at a time.
 *
 * Two RC QPs on one device, A and B. First a connection that works; then, one at a time,
 * each mistake of the chapter's triage tree, with what decides it:
 *   port     the port's state (ibv_query_port; `ibv_devinfo`, `rdma link`)
 *   gid      a source GID index outside the table; the IPv6 link-local GID as source
 *            for an IPv4 peer
 *   qpn      a wrong remote QP number (or a peer whose QP is gone)
 *   psn      the receiver expects another PSN than the sender uses
 *   mtu      a path MTU larger than the port's active MTU
 *   access   an RDMA WRITE to a QP that did not grant REMOTE_WRITE
 * For each: did ibv_modify_qp accept it, A's completion, whether B received, and the
 * port's hw_counters that moved (rxe's names; chapter 11).
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 17_triage 17_triage.c -libverbs
 * Run:   ./17_triage [device]
 */
#include "lab_common.h"

#define BUF 4096

/* The hw_counters the tree looks at (rxe's names; other drivers: chapter 11). */
static const char *const COUNTERS[] = {
	"sent_pkts",	      "rcvd_pkts",	    "duplicate_request", "out_of_seq_request",
	"rcvd_seq_err",	      "completer_retry_err", "retry_exceeded_err", "send_err",
};
#define NCOUNTERS (sizeof(COUNTERS) / sizeof(COUNTERS[0]))

static const char *device;

static void read_counters(unsigned long long *v)
{
	char path[256];
	size_t i;

	for (i = 0; i < NCOUNTERS; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s",
			 device, COUNTERS[i]);
		f = fopen(path, "r");
		v[i] = 0;
		if (f) {
			if (fscanf(f, "%llu", &v[i]) != 1)
				v[i] = 0;
			fclose(f);
		}
	}
}

/* Print the counters that moved, e.g. "duplicate_request +1". */
static void print_moved(const unsigned long long *before)
{
	unsigned long long after[NCOUNTERS];
	size_t i;
	int any = 0;

	read_counters(after);
	printf("   counters:");
	for (i = 0; i < NCOUNTERS; i++)
		if (after[i] != before[i]) {
			printf(" %s +%llu", COUNTERS[i], after[i] - before[i]);
			any = 1;
		}
	printf("%s\n", any ? "" : " none moved");
}

/* What one branch changes; zero means "as it should be". */
struct mistake {
	const char *name;
	int sgid_index;	     /* -1: the right one */
	int wrong_qpn;	     /* A sends to a QPN that is not B's */
	int psn_skew;	     /* B expects A's PSN + this */
	enum ibv_mtu mtu;    /* 0: the port's active MTU */
	int write_no_grant;  /* A WRITEs; B grants nothing */
	int len;	     /* bytes to send (0: 64) */
};

/* RESET -> INIT -> RTR -> RTS for QP i, with the mistake's parameters. Returns 0, or -1
 * after printing which transition the device refused and why. */
static int bring_up(struct loop *l, int i, const struct conn_info *peer, int access,
		    int sgid_index, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a;
	const char *why = "";
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	if ((rc = ibv_modify_qp(l->qp[i], &a, IBV_QP_STATE)))
		goto refused;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = l->port;
	a.qp_access_flags = access;
	if ((rc = ibv_modify_qp(l->qp[i], &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS)))
		goto refused;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.min_rnr_timer = 12;
	if (ah_attr_for(&a.ah_attr, l->pa.link_layer, l->port, sgid_index, &l->gid, peer, &why)) {
		FAIL("address vector: %s", why);
		return -1;
	}
	if ((rc = ibv_modify_qp(l->qp[i], &a,
				IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					IBV_QP_MIN_RNR_TIMER)))
		goto refused;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = l->psn[i];
	a.timeout = 14; /* 67 ms */
	a.retry_cnt = 2; /* a lost cause is known after 3 x 67 ms */
	a.rnr_retry = LAB_RNR_RETRY;
	if ((rc = ibv_modify_qp(l->qp[i], &a,
				IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		goto refused;
	return 0;
refused:
	printf("   %c: ibv_modify_qp to %s refused: errno %d (%s)\n", 'A' + i,
	       qp_state_name(a.qp_state), rc, strerror(rc));
	return -1;
}

static int branch(struct loop *l, struct ibv_mr *mr, char *buf, const struct mistake *m)
{
	unsigned long long before[NCOUNTERS];
	struct conn_info ia, ib;
	struct ibv_wc wc;
	uint32_t len = m->len ? (uint32_t)m->len : 64;
	int n;

	printf("%s\n", m->name);
	read_counters(before);
	l->psn[0] = random_psn();
	l->psn[1] = random_psn();
	ia = loop_info(l, 0);
	ib = loop_info(l, 1);
	ia.psn = (ia.psn + (uint32_t)m->psn_skew) & 0xffffff; /* what B will expect */
	if (m->wrong_qpn)
		ib.qpn = 0xfffff0; /* nobody's QP */
	if (bring_up(l, 1, &ia, m->write_no_grant ? 0 : IBV_ACCESS_REMOTE_WRITE, l->gid_index,
		     m->mtu ? m->mtu : l->pa.active_mtu) ||
	    bring_up(l, 0, &ib, 0, m->sgid_index >= 0 ? m->sgid_index : l->gid_index,
		     m->mtu ? m->mtu : l->pa.active_mtu)) {
		print_moved(before);
		return 0;
	}
	if (post_recv_one(l->qp[1], mr, buf + BUF, BUF, 100))
		return -1;
	snprintf(buf, BUF, "triage message");
	if (post_one(l->qp[0], m->write_no_grant ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, mr, buf, len,
		     (uintptr_t)(buf + BUF), mr->rkey, 1))
		return -1;
	n = poll_wc(l->cq[0], &wc, 10000);
	if (n < 0)
		return -1;
	if (n == 0)
		printf("   A: no completion within 10 s; A's QP %s\n",
		       qp_state_name(qp_state(l->qp[0])));
	else
		printf("   A: %s; A's QP %s\n", wc_status_name(wc.status),
		       qp_state_name(qp_state(l->qp[0])));
	n = poll_wc(l->cq[1], &wc, 300);
	if (n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV)
		printf("   B: received %u bytes\n", wc.byte_len);
	else if (n == 1)
		printf("   B: completion %s\n", wc_status_name(wc.status));
	else
		printf("   B: nothing received; B's QP %s\n", qp_state_name(qp_state(l->qp[1])));
	print_moved(before);
	return 0;
}

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_mr *mr = NULL;
	struct ibv_device_attr da;
	char *buf = NULL;
	int ret = 1, i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	device = ibv_get_device_name(l.ctx->device);
	printf("port %u: state %s, physical state %u, active_mtu %d, gid_tbl_len %d\n", l.port,
	       ibv_port_state_str(l.pa.state), l.pa.phys_state,
	       128 << l.pa.active_mtu, l.pa.gid_tbl_len);
	if (ibv_query_device(l.ctx, &da))
		goto out;
	if (posix_memalign((void **)&buf, 4096, 2 * BUF)) {
		FAIL("posix_memalign");
		goto out;
	}
	memset(buf, 0, 2 * BUF);
	mr = ibv_reg_mr(l.pd, buf, 2 * BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	{
		const struct mistake tree[] = {
			{ .name = "baseline: everything right", .sgid_index = -1 },
			{ .name = "gid: source GID index = gid_tbl_len (outside the table)",
			  .sgid_index = l.pa.gid_tbl_len },
			{ .name = "gid: source GID index 0 (IPv6 link-local) for an IPv4 peer",
			  .sgid_index = 0 },
			{ .name = "qpn: A sends to QPN 0xfffff0", .sgid_index = -1, .wrong_qpn = 1 },
			{ .name = "psn: B expects A's PSN + 100 (A is behind)", .sgid_index = -1,
			  .psn_skew = 100 },
			{ .name = "psn: B expects A's PSN - 100 (A is ahead)", .sgid_index = -1,
			  .psn_skew = -100 },
			{ .name = "mtu: path MTU 4096 on a port whose active MTU is smaller, 3000-byte SEND",
			  .sgid_index = -1, .mtu = IBV_MTU_4096, .len = 3000 },
			{ .name = "access: RDMA WRITE to B, whose QP grants no REMOTE_WRITE",
			  .sgid_index = -1, .write_no_grant = 1 },
		};

		for (i = 0; i < (int)(sizeof(tree) / sizeof(tree[0])); i++)
			if (branch(&l, mr, buf, &tree[i]))
				goto out;
	}
	ret = 0;
	printf("OK\n");
out:
	/* QPs first (loop_close), the MR before the PD: dereg here, then close the rest. */
	for (i = 0; i < 2; i++)
		if (l.qp[i] && !ibv_destroy_qp(l.qp[i]))
			l.qp[i] = NULL;
	if (mr && ibv_dereg_mr(mr))
		FAIL("ibv_dereg_mr: %s", strerror(errno));
	loop_close(&l);
	free(buf);
	return ret;
}
