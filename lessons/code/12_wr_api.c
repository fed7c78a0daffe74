/*
 * 12_wr_api.c - chapter 12: the extended work-request API (ibv_wr_*) and the extended
 * completion queue (ibv_start_poll / ibv_next_poll).
 *
 * ibv_create_qp_ex() creates a QP that declares up front which operations it will post
 * (send_ops_flags); ibv_qp_to_qp_ex() gives its extended handle. Work requests are
 * then built field by field between ibv_wr_start() and ibv_wr_complete(), with no
 * struct ibv_send_wr and no linked list: a provider can write each WR straight into
 * the send queue and ring the doorbell once for the whole batch at ibv_wr_complete().
 * ibv_create_cq_ex() declares which completion fields will be read; they are read one
 * by one (ibv_wc_read_*) during a poll session.
 *
 * A posts an RDMA WRITE and a SEND WITH IMMEDIATE in one batch; both completions are
 * read from A's extended CQ, B's receive from its ordinary CQ.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 12_wr_api 12_wr_api.c -libverbs
 * Run:   ./12_wr_api [device]
 */
#include "lab_common.h"

#define SZ 64

int main(int argc, char **argv)
{
	struct ibv_cq_init_attr_ex cqa;
	struct ibv_qp_init_attr_ex qia;
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_cq_ex *cqx = NULL;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *amr = NULL, *bmr = NULL, *rmr = NULL;
	struct ibv_wc wc;
	struct loop l;
	char *abuf = NULL, *bbuf = NULL, *rbuf = NULL;
	int ret = 1, rc, seen = 0;
	double deadline;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	memset(&cqa, 0, sizeof(cqa));
	cqa.cqe = 16;
	cqa.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
	cqx = ibv_create_cq_ex(l.ctx, &cqa);
	if (!cqx) {
		FAIL("ibv_create_cq_ex: %s", strerror(errno));
		goto out;
	}
	memset(&qia, 0, sizeof(qia));
	qia.qp_type = IBV_QPT_RC;
	qia.send_cq = ibv_cq_ex_to_cq(cqx);
	qia.recv_cq = ibv_cq_ex_to_cq(cqx);
	qia.cap.max_send_wr = 16;
	qia.cap.max_recv_wr = 1;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	qia.pd = l.pd;
	qia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM;
	if (ibv_destroy_qp(l.qp[0])) {
		l.qp[0] = NULL;
		goto out;
	}
	l.qp[0] = ibv_create_qp_ex(l.ctx, &qia);
	if (!l.qp[0]) {
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
		goto out;
	}
	qpx = ibv_qp_to_qp_ex(l.qp[0]);
	if (!qpx) {
		FAIL("ibv_qp_to_qp_ex: this provider has no extended QP");
		goto out;
	}
	printf("A: extended QP 0x%06x, send_ops WRITE and SEND_WITH_IMM\n", l.qp[0]->qp_num);
	if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		goto out;
	abuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	rbuf = calloc(1, SZ);
	amr = abuf ? ibv_reg_mr(l.pd, abuf, SZ, 0) : NULL;
	bmr = amr && bbuf ? ibv_reg_mr(l.pd, bbuf, SZ,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) :
			    NULL;
	rmr = bmr && rbuf ? ibv_reg_mr(l.pd, rbuf, SZ, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr || post_recv_one(l.qp[1], rmr, rbuf, SZ, 7))
		goto out;
	snprintf(abuf, SZ, "written with ibv_wr_rdma_write");

	/* One batch, two WRs, one doorbell. */
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(qpx, amr->lkey, (uintptr_t)abuf, SZ);
	qpx->wr_id = 2;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qpx, htonl(0x5eed));
	ibv_wr_set_sge(qpx, amr->lkey, (uintptr_t)abuf, 8);
	rc = ibv_wr_complete(qpx);
	if (rc) {
		FAIL("ibv_wr_complete: %s", strerror(rc));
		goto out;
	}

	/* A poll session: start, next..., end; fields read through the CQ. */
	deadline = now_us() + 5e6;
	while (seen < 2 && now_us() < deadline) {
		rc = ibv_start_poll(cqx, &pa);
		if (rc == ENOENT)
			continue;
		if (rc) {
			FAIL("ibv_start_poll: %s", strerror(rc));
			goto out;
		}
		do {
			printf("A: wr_id %llu %s, opcode %s, qp 0x%06x\n",
			       (unsigned long long)cqx->wr_id, wc_status_name(cqx->status),
			       ibv_wc_read_opcode(cqx) == IBV_WC_RDMA_WRITE ? "RDMA_WRITE" : "SEND",
			       ibv_wc_read_qp_num(cqx));
			if (cqx->status != IBV_WC_SUCCESS || cqx->wr_id != (uint64_t)seen + 1) {
				ibv_end_poll(cqx);
				goto out;
			}
			seen++;
		} while (ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
	}
	if (seen != 2 || poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("missing completions (%d at A)", seen);
		goto out;
	}
	printf("B: %s with imm 0x%x; B's buffer \"%s\"\n",
	       wc.opcode == IBV_WC_RECV ? "IBV_WC_RECV" : "?",
	       wc.wc_flags & IBV_WC_WITH_IMM ? ntohl(wc.imm_data) : 0, bbuf);
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != 0x5eed ||
	    strcmp(bbuf, "written with ibv_wr_rdma_write"))
		goto out;
	ret = 0;
out:
	if (amr && ibv_dereg_mr(amr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	if (rmr && ibv_dereg_mr(rmr))
		ret = 1;
	if (l.qp[0] && ibv_destroy_qp(l.qp[0]))
		ret = 1;
	l.qp[0] = NULL;
	if (cqx && ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)))
		ret = 1;
	loop_close(&l);
	free(abuf);
	free(bbuf);
	free(rbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
