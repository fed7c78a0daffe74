/*
 * 06_write_read.c - chapter 6: one-sided operations.
 *
 * A and B are two connected RC QPs on one device (lab_common.h). B registers a buffer
 * with remote access and "advertises" (address, rkey) - here by a plain assignment,
 * across machines over any side channel. Then A:
 *   1. RDMA WRITEs into B's buffer: B's CPU posts nothing and gets no completion;
 *   2. RDMA WRITE WITH IMMEDIATE: same data path, but it consumes a receive WR on B
 *      and B gets a completion carrying 32 bits of immediate data;
 *   3. RDMA READs B's buffer back;
 *   4. atomics: FETCH_AND_ADD and COMPARE_AND_SWAP on an 8-byte counter at B.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 06_write_read 06_write_read.c -libverbs
 * Run:   ./06_write_read [device]
 */
#include "lab_common.h"

#define SZ 4096

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_device_attr da;
	char *abuf = NULL, *bbuf = NULL;
	uint64_t *counter = NULL, *old = NULL;
	struct ibv_mr *amr = NULL, *bmr = NULL, *cmr = NULL, *omr = NULL;
	struct ibv_wc wc;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint64_t raddr;
	uint32_t rkey;
	int ret = 1, rc, extra;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	/* B is the target of WRITE, READ and atomics; nobody touches A's memory. */
	if (loop_connect(&l, 0,
			 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
			 LAB_RNR_RETRY))
		goto out;
	if (ibv_query_device(l.ctx, &da)) {
		FAIL("ibv_query_device: %s", strerror(errno));
		goto out;
	}
	abuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	counter = aligned_alloc(8, 8); /* atomics need 8-byte aligned targets */
	old = aligned_alloc(8, 8);
	if (!abuf || !bbuf || !counter || !old) {
		FAIL("allocation");
		goto out;
	}
	*counter = 100;
	*old = 0;
	amr = ibv_reg_mr(l.pd, abuf, SZ, IBV_ACCESS_LOCAL_WRITE);
	omr = ibv_reg_mr(l.pd, old, 8, IBV_ACCESS_LOCAL_WRITE);
	bmr = ibv_reg_mr(l.pd, bbuf, SZ,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	cmr = ibv_reg_mr(l.pd, counter, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!amr || !bmr || !cmr || !omr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	/* What B tells A out of band: where, and the key that opens it. */
	raddr = (uintptr_t)bbuf;
	rkey = bmr->rkey;
	printf("B advertises addr 0x%llx rkey 0x%x len %d\n", (unsigned long long)raddr, rkey,
	       SZ);

	/* 1. WRITE: data lands in B's memory; only A sees a completion. */
	snprintf(abuf, SZ, "written by A with RDMA WRITE");
	if (post_one(l.qp[0], IBV_WR_RDMA_WRITE, amr, abuf, 64, raddr, rkey, 1) ||
	    poll_wc(l.cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("RDMA WRITE did not complete successfully");
		goto out;
	}
	extra = poll_wc(l.cq[1], &wc, 100);
	printf("WRITE: A completion %s; B's buffer now \"%s\"; completions at B: %d\n",
	       wc_status_name(IBV_WC_SUCCESS), bbuf, extra);
	if (extra != 0 || strcmp(bbuf, "written by A with RDMA WRITE") != 0) {
		FAIL("B should see the data and no completion");
		goto out;
	}

	/* 2. WRITE_WITH_IMM: B must have a receive posted; its buffer is not used. */
	if (post_recv_one(l.qp[1], bmr, bbuf + 2048, 16, 7))
		goto out;
	snprintf(abuf, SZ, "second write, with immediate");
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)abuf;
	sge.length = 64;
	sge.lkey = amr->lkey;
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(0xC0FFEE);
	wr.wr.rdma.remote_addr = raddr + 64;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(l.qp[0], &wr, &bad);
	if (rc) {
		FAIL("ibv_post_send(WRITE_WITH_IMM): %s", strerror(rc));
		goto out;
	}
	if (poll_wc(l.cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("WRITE_WITH_IMM: no successful completion at A");
		goto out;
	}
	if (poll_wc(l.cq[1], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS ||
	    wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
		FAIL("WRITE_WITH_IMM: B got no RECV_RDMA_WITH_IMM completion");
		goto out;
	}
	printf("WRITE_WITH_IMM: B completion opcode IBV_WC_RECV_RDMA_WITH_IMM imm 0x%x "
	       "byte_len %u; B's buffer+64 \"%s\"\n",
	       ntohl(wc.imm_data), wc.byte_len, bbuf + 64);

	/* 3. READ: A pulls 64 bytes from B into its own buffer. */
	memset(abuf, 0, SZ);
	strcpy(bbuf + 128, "B's data, fetched by A with RDMA READ");
	if (post_one(l.qp[0], IBV_WR_RDMA_READ, amr, abuf, 64, raddr + 128, rkey, 3) ||
	    poll_wc(l.cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS ||
	    wc.opcode != IBV_WC_RDMA_READ) {
		FAIL("RDMA READ did not complete successfully");
		goto out;
	}
	printf("READ: A completion IBV_WC_RDMA_READ %s; A's buffer now \"%s\"\n",
	       wc_status_name(wc.status), abuf);

	/* 4. Atomics on B's 8-byte counter; the old value comes back into A's `old`. */
	if (da.atomic_cap == IBV_ATOMIC_NONE) {
		printf("ATOMICS: not supported by this device, skipped\n");
	} else {
		memset(&wr, 0, sizeof(wr));
		sge.addr = (uintptr_t)old;
		sge.length = 8;
		sge.lkey = omr->lkey;
		wr.wr_id = 4;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.atomic.remote_addr = (uintptr_t)counter;
		wr.wr.atomic.rkey = cmr->rkey;
		wr.wr.atomic.compare_add = 5;
		rc = ibv_post_send(l.qp[0], &wr, &bad);
		if (rc || poll_wc(l.cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("FETCH_AND_ADD failed");
			goto out;
		}
		printf("FETCH_AND_ADD +5: old value %llu, counter at B now %llu\n",
		       (unsigned long long)*old, (unsigned long long)*counter);
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = 105; /* expected */
		wr.wr.atomic.swap = 1;
		rc = ibv_post_send(l.qp[0], &wr, &bad);
		if (rc || poll_wc(l.cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("COMPARE_AND_SWAP failed");
			goto out;
		}
		printf("CMP_AND_SWP 105->1: old value %llu, counter at B now %llu\n",
		       (unsigned long long)*old, (unsigned long long)*counter);
	}
	printf("OK\n");
	ret = 0;
out:
	/* MRs first, while their PD still exists; then QPs, CQs, PD, context. */
	if (amr && ibv_dereg_mr(amr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	if (cmr && ibv_dereg_mr(cmr))
		ret = 1;
	if (omr && ibv_dereg_mr(omr))
		ret = 1;
	loop_close(&l);
	free(abuf);
	free(bbuf);
	free(counter);
	free(old);
	return ret;
}
