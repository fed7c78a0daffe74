/*
 * Exercise 09-teardown (chapter 9): fix a broken teardown.
 *
 * The program builds a context, a PD, a CQ, an MR and a QP, and frees them. Every
 * destroy call is checked: a parent freed while a child still uses it answers EBUSY
 * and stays alive. TODO: free everything in an order that never gets EBUSY.
 *
 * Checked by what it did: at lab_checkpoint() (before ibv_close_device) rdma resource
 * show counts no PD, CQ, QP or MR more than before the run; exit 0.
 */
#include "lab_common.h"

static int busy;

static void check(const char *what, int rc)
{
	if (rc) {
		printf("%s: %s\n", what, strerror(rc == -1 ? errno : rc));
		if ((rc == -1 ? errno : rc) == EBUSY)
			busy++;
	}
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx = open_device(argc > 1 ? argv[1] : NULL);
	struct ibv_qp_init_attr init;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	char *buf = calloc(1, 4096);
	int left = 4;

	if (!ctx || !buf)
		return 1;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	qp = mr && cq ? ibv_create_qp(pd, &init) : NULL;
	if (!qp) {
		FAIL("setup: %s", strerror(errno));
		return 1;
	}
	/* Users before what they use: the QP uses the PD and the CQ, the MR the PD. */
	check("ibv_destroy_qp", ibv_destroy_qp(qp));
	left--;
	check("ibv_dereg_mr", ibv_dereg_mr(mr));
	left--;
	check("ibv_destroy_cq", ibv_destroy_cq(cq));
	left--;
	check("ibv_dealloc_pd", ibv_dealloc_pd(pd));
	left--;
	/* The checker reads rdma resource show here: the context is still open. */
	lab_checkpoint();
	if (ibv_close_device(ctx))
		return 1;
	free(buf);
	printf("teardown: %d EBUSY, %s\n", busy, busy || left ? "something leaked" : "everything freed");
	if (busy)
		return 1;
	printf("OK\n");
	return 0;
}
