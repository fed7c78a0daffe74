/*
 * 06_sge_rereg.c - chapter 6: one message from several buffers (gather), into several
 * buffers (scatter), and changing a registration in place with ibv_rereg_mr().
 *
 * 1. A's SEND has three SGEs: a header and a payload from one MR, a trailer from
 *    another. B's receive has two SGEs: the first 8 bytes land in one buffer, the rest in
 *    another. The message is the concatenation; only the byte count travels.
 * 2. A WR with more SGEs than the QP was created with is refused by ibv_post_send().
 * 3. ibv_rereg_mr() on the trailer's MR: change its access flags, move it to another PD,
 *    point it at another buffer. Each prints the keys before and after (for the lesson;
 *    real programs never print keys) and whether the device did it.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 06_sge_rereg 06_sge_rereg.c -libverbs
 * Run:   ./06_sge_rereg [device]
 */
#include "lab_common.h"

#define SEND_SGE 3
#define RECV_SGE 2
#define MAX_SGE 64 /* room for the "one too many" list */

static uint32_t granted_send_sge; /* what the device granted A: at least SEND_SGE */

static const char *rereg_result(int rc)
{
	switch (rc) {
	case 0:
		return "done";
	case IBV_REREG_MR_ERR_INPUT:
		return "IBV_REREG_MR_ERR_INPUT";
	case IBV_REREG_MR_ERR_DONT_FORK_NEW:
		return "IBV_REREG_MR_ERR_DONT_FORK_NEW";
	case IBV_REREG_MR_ERR_DO_FORK_OLD:
		return "IBV_REREG_MR_ERR_DO_FORK_OLD";
	case IBV_REREG_MR_ERR_CMD:
		return "IBV_REREG_MR_ERR_CMD";
	case IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW:
		return "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW";
	}
	return "unknown";
}

/* Open the device, a PD, two CQs and two RC QPs with room for several SGEs per WR. */
static int open_pair(struct loop *l, const char *dev)
{
	struct ibv_qp_init_attr init;
	int i;

	memset(l, 0, sizeof(*l));
	l->port = 1;
	l->ctx = open_device(dev);
	if (!l->ctx || ibv_query_port(l->ctx, l->port, &l->pa) ||
	    pick_gid(l->ctx, l->port, lab_netdev(), &l->gid_index, &l->gid))
		return -1;
	l->pd = ibv_alloc_pd(l->ctx);
	if (!l->pd)
		return -1;
	for (i = 0; i < 2; i++) {
		l->cq[i] = ibv_create_cq(l->ctx, 16, NULL, NULL, 0);
		if (!l->cq[i])
			return -1;
		memset(&init, 0, sizeof(init));
		init.send_cq = init.recv_cq = l->cq[i];
		init.qp_type = IBV_QPT_RC;
		init.sq_sig_all = 1;
		init.cap.max_send_wr = init.cap.max_recv_wr = 8;
		init.cap.max_send_sge = SEND_SGE;
		init.cap.max_recv_sge = RECV_SGE;
		l->qp[i] = ibv_create_qp(l->pd, &init);
		if (!l->qp[i]) {
			FAIL("ibv_create_qp with %d send SGEs: %s", SEND_SGE, strerror(errno));
			return -1;
		}
		/* The device may grant more than asked; never less, or create fails. */
		if (i == 0)
			granted_send_sge = init.cap.max_send_sge;
		printf("%c: QP 0x%06x, max_send_sge %u, max_recv_sge %u\n", 'A' + i,
		       l->qp[i]->qp_num, init.cap.max_send_sge, init.cap.max_recv_sge);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_mr *mr_a = NULL, *mr_t = NULL, *mr_b = NULL;
	struct ibv_pd *pd2 = NULL;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge s[MAX_SGE], r[RECV_SGE];
	struct ibv_wc wc;
	char *a = NULL, *t = NULL, *t2 = NULL, *b = NULL;
	uint32_t lkey, rkey;
	int rc, ret = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (open_pair(&l, argc > 1 ? argv[1] : NULL))
		goto out;
	/* Registered memory on the heap, page-aligned. */
	if (posix_memalign((void **)&a, 4096, 4096) || posix_memalign((void **)&t, 4096, 4096) ||
	    posix_memalign((void **)&t2, 4096, 4096) || posix_memalign((void **)&b, 4096, 4096)) {
		FAIL("posix_memalign");
		goto out;
	}
	memset(a, 0, 4096);
	memset(t, 0, 4096);
	memset(t2, 0, 4096);
	memset(b, 0, 4096);
	mr_a = ibv_reg_mr(l.pd, a, 4096, 0); /* only read by A's own SEND: no rights at all */
	mr_t = ibv_reg_mr(l.pd, t, 4096, 0);
	mr_b = ibv_reg_mr(l.pd, b, 4096, IBV_ACCESS_LOCAL_WRITE); /* receives write into it */
	if (!mr_a || !mr_t || !mr_b) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	if (loop_connect(&l, 0, 0, LAB_RNR_RETRY))
		goto out;

	/* 1. Scatter: 8 bytes to b[0..8), the rest to b[1024..). */
	memset(r, 0, sizeof(r));
	r[0] = (struct ibv_sge){ .addr = (uintptr_t)b, .length = 8, .lkey = mr_b->lkey };
	r[1] = (struct ibv_sge){ .addr = (uintptr_t)(b + 1024), .length = 1024, .lkey = mr_b->lkey };
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 10;
	rwr.sg_list = r;
	rwr.num_sge = RECV_SGE;
	rc = ibv_post_recv(l.qp[1], &rwr, &rbad);
	if (rc) {
		FAIL("ibv_post_recv: %s", strerror(rc));
		goto out;
	}
	/* Gather: "HEADER1|" and "payload|" from A's MR, "trailer" from the other MR. */
	memcpy(a, "HEADER1|", 8);
	memcpy(a + 512, "payload|", 8);
	memcpy(t, "trailer", 8); /* 7 characters and the terminating zero */
	s[0] = (struct ibv_sge){ .addr = (uintptr_t)a, .length = 8, .lkey = mr_a->lkey };
	s[1] = (struct ibv_sge){ .addr = (uintptr_t)(a + 512), .length = 8, .lkey = mr_a->lkey };
	s[2] = (struct ibv_sge){ .addr = (uintptr_t)t, .length = 8, .lkey = mr_t->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = s;
	wr.num_sge = SEND_SGE;
	wr.opcode = IBV_WR_SEND;
	rc = ibv_post_send(l.qp[0], &wr, &bad);
	if (rc) {
		FAIL("ibv_post_send with %d SGEs: %s", SEND_SGE, strerror(rc));
		goto out;
	}
	if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS ||
	    poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("the 3-SGE SEND did not complete");
		goto out;
	}
	printf("1. SEND of 3 SGEs (8 + 8 + 8 bytes): B received %u bytes\n", wc.byte_len);
	printf("   B's first SGE (8 bytes): \"%.8s\"; second SGE: \"%s\"\n", b, b + 1024);

	/* 2. One SGE more than the QP has room for (what the device granted, not what we
	 * asked: a device may round up). */
	if (granted_send_sge + 1 > MAX_SGE) {
		FAIL("the device granted %u send SGEs; this test has room for %d", granted_send_sge,
		     MAX_SGE);
		goto out;
	}
	for (rc = SEND_SGE; rc < (int)granted_send_sge + 1; rc++)
		s[rc] = s[2];
	wr.num_sge = (int)granted_send_sge + 1;
	rc = ibv_post_send(l.qp[0], &wr, &bad);
	printf("2. ibv_post_send with one SGE more than the QP's max_send_sge: %s, returned %d "
	       "(%s)\n",
	       rc ? "refused" : "ACCEPTED", rc, rc ? strerror(rc) : "-");
	if (!rc) {
		FAIL("a WR with too many SGEs was accepted");
		goto out;
	}

	/* 3a. Access flags: the trailer's MR may now be written by receives. */
	lkey = mr_t->lkey;
	rkey = mr_t->rkey;
	rc = ibv_rereg_mr(mr_t, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			  IBV_ACCESS_LOCAL_WRITE);
	printf("3a. rereg CHANGE_ACCESS (+LOCAL_WRITE): %s; lkey %s, rkey %s\n",
	       rereg_result(rc), mr_t->lkey == lkey ? "kept" : "changed",
	       mr_t->rkey == rkey ? "kept" : "changed");
	if (rc)
		printf("    errno %d (%s)\n", errno, strerror(errno));
	/* 3b. Another PD: the MR now only works with QPs of that PD. */
	pd2 = ibv_alloc_pd(l.ctx);
	if (!pd2) {
		FAIL("ibv_alloc_pd: %s", strerror(errno));
		goto out;
	}
	lkey = mr_t->lkey;
	rc = ibv_rereg_mr(mr_t, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
	printf("3b. rereg CHANGE_PD: %s; lkey %s\n", rereg_result(rc),
	       mr_t->lkey == lkey ? "kept" : "changed");
	if (rc)
		printf("    errno %d (%s)\n", errno, strerror(errno));
	/* 3c. Another buffer: the same MR object, a new translation. */
	lkey = mr_t->lkey;
	rc = ibv_rereg_mr(mr_t, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, t2, 4096, 0);
	printf("3c. rereg CHANGE_TRANSLATION (another buffer): %s; lkey %s\n", rereg_result(rc),
	       mr_t->lkey == lkey ? "kept" : "changed");
	if (rc)
		printf("    errno %d (%s)\n", errno, strerror(errno));
	ret = 0;
	printf("OK\n");
out:
	/* Even after a failed ibv_rereg_mr, the MR must still be deregistered. */
	if (mr_t && ibv_dereg_mr(mr_t))
		FAIL("ibv_dereg_mr(trailer): %s", strerror(errno));
	if (mr_a)
		ibv_dereg_mr(mr_a);
	if (mr_b)
		ibv_dereg_mr(mr_b);
	if (pd2 && ibv_dealloc_pd(pd2))
		FAIL("ibv_dealloc_pd(pd2): %s", strerror(errno));
	loop_close(&l);
	free(a);
	free(t);
	free(t2);
	free(b);
	return ret;
}
