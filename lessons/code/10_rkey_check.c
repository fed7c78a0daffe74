/*
 * 10_rkey_check.c - chapter 10: an rkey is a capability, and the responder checks it.
 *
 * B owns a 4 KiB buffer. A (connected RC QP on the same device) tries to WRITE into it
 * in several ways; the responder's device decides, B's CPU does nothing. Each probe runs
 * on a freshly connected pair because a rejected access moves both QPs to ERR.
 *
 *   1. right rkey, inside the MR                     -> success
 *   2. right rkey, range runs past the end of the MR -> IBV_WC_REM_ACCESS_ERR
 *   3. rkey of an MR registered for REMOTE_READ only -> IBV_WC_REM_ACCESS_ERR
 *   4. rkey of an MR in ANOTHER protection domain   -> IBV_WC_REM_ACCESS_ERR
 *   5. rkey of an MR that has been deregistered      -> IBV_WC_REM_ACCESS_ERR
 *   6. memory window (type 2): B binds a 256-byte window inside its MR and hands out
 *      the window's rkey instead of the MR's. Writes inside the window succeed. After B
 *      invalidates the window (LOCAL_INV), its rkey is refused. B binds a second window
 *      (a new key; a bound window is never bound again without LOCAL_INV first). A write
 *      outside it (but inside the MR) must fail on hardware; Soft-RoCE (rxe) checks only
 *      the MR's bounds: the program reports which it is.
 *   7. right rkey, inside the MR, but B's QP was connected without REMOTE_WRITE in its
 *      access flags -> IBV_WC_REM_INV_REQ_ERR: the QP is checked before the key.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 10_rkey_check 10_rkey_check.c -libverbs
 * Run:   ./10_rkey_check [device]
 */
#include "lab_common.h"

#define SZ 4096

static struct loop l;
static struct ibv_mr *amr;
static char *abuf;
static int failures;

/* Reconnect A and B, WRITE 64 bytes to (addr, rkey), print and check the outcome. */
static int probe(const char *what, uint64_t addr, uint32_t rkey, uint32_t len,
		 enum ibv_wc_status expect, int reconnect)
{
	struct ibv_wc wc;

	if (reconnect && loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		return -1;
	if (post_one(l.qp[0], IBV_WR_RDMA_WRITE, amr, abuf, len, addr, rkey, 1))
		return -1;
	if (poll_wc(l.cq[0], &wc, 5000) != 1) {
		FAIL("%s: no completion", what);
		return -1;
	}
	printf("%-52s %s\n", what, wc_status_name(wc.status));
	if (wc.status != expect) {
		printf("  expected %s\n", wc_status_name(expect));
		failures++;
	}
	return 0;
}

/*
 * B binds `mw` to [addr, addr+len) of `mr` for remote writes. *rkey holds the window's
 * previous key on entry and its new one on return: every bind takes a fresh key (the
 * next value of the key's low 8 bits), so a key handed out before stays dead.
 */
static int bind_window(struct ibv_mw *mw, struct ibv_mr *mr, void *addr, size_t len,
		       uint32_t *rkey)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 100;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(*rkey);
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	rc = ibv_post_send(l.qp[1], &wr, &bad);
	if (rc) {
		FAIL("post BIND_MW: %s", strerror(rc));
		return -1;
	}
	if (poll_wc(l.cq[1], &wc, 2000) != 1) {
		FAIL("BIND_MW: no completion");
		return -1;
	}
	if (wc.status != IBV_WC_SUCCESS) {
		FAIL("BIND_MW completed with %s", wc_status_name(wc.status));
		return -1;
	}
	*rkey = wr.bind_mw.rkey;
	return 0;
}

/* B invalidates the window's rkey with a LOCAL_INV work request. */
static int invalidate(uint32_t rkey)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 101;
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = rkey;
	rc = ibv_post_send(l.qp[1], &wr, &bad);
	if (rc) {
		FAIL("post LOCAL_INV: %s", strerror(rc));
		return -1;
	}
	if (poll_wc(l.cq[1], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("LOCAL_INV did not complete successfully");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_pd *pd2 = NULL;
	struct ibv_mr *bmr = NULL, *romr = NULL, *pd2mr = NULL, *gonemr = NULL;
	struct ibv_mw *mw = NULL, *mw2 = NULL;
	char *bbuf = NULL, *robuf = NULL, *pd2buf = NULL, *gonebuf = NULL;
	uint64_t base;
	uint32_t gone_rkey, mw_rkey, old_rkey;
	int ret = 1, enforced;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	abuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	robuf = calloc(1, SZ);
	pd2buf = calloc(1, SZ);
	gonebuf = calloc(1, SZ);
	pd2 = ibv_alloc_pd(l.ctx);
	if (!abuf || !bbuf || !robuf || !pd2buf || !gonebuf || !pd2) {
		FAIL("setup: %s", strerror(errno));
		goto out;
	}
	strcpy(abuf, "data from A");
	amr = ibv_reg_mr(l.pd, abuf, SZ, IBV_ACCESS_LOCAL_WRITE);
	bmr = ibv_reg_mr(l.pd, bbuf, SZ,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	romr = ibv_reg_mr(l.pd, robuf, SZ, IBV_ACCESS_REMOTE_READ);
	pd2mr = ibv_reg_mr(pd2, pd2buf, SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	gonemr = ibv_reg_mr(l.pd, gonebuf, SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!amr || !bmr || !romr || !pd2mr || !gonemr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	base = (uintptr_t)bbuf;
	printf("B's MR: addr 0x%llx len %d rkey 0x%x\n", (unsigned long long)base, SZ, bmr->rkey);

	if (probe("1. inside the MR", base + 128, bmr->rkey, 64, IBV_WC_SUCCESS, 1) ||
	    probe("2. last 32 bytes of the MR + 32 bytes past its end", base + SZ - 32,
		  bmr->rkey, 64, IBV_WC_REM_ACCESS_ERR, 1) ||
	    probe("3. MR registered with REMOTE_READ only", (uintptr_t)robuf, romr->rkey, 64,
		  IBV_WC_REM_ACCESS_ERR, 1) ||
	    probe("4. MR of another protection domain", (uintptr_t)pd2buf, pd2mr->rkey, 64,
		  IBV_WC_REM_ACCESS_ERR, 1))
		goto out;

	gone_rkey = gonemr->rkey;
	if (probe("5a. MR about to be deregistered", (uintptr_t)gonebuf, gone_rkey, 64,
		  IBV_WC_SUCCESS, 1))
		goto out;
	if (ibv_dereg_mr(gonemr)) {
		FAIL("ibv_dereg_mr");
		gonemr = NULL;
		goto out;
	}
	gonemr = NULL;
	if (probe("5b. same rkey after ibv_dereg_mr", (uintptr_t)gonebuf, gone_rkey, 64,
		  IBV_WC_REM_ACCESS_ERR, 1))
		goto out;

	/* 6. Memory window. */
	mw = ibv_alloc_mw(l.pd, IBV_MW_TYPE_2);
	if (!mw) {
		printf("6. memory windows: ibv_alloc_mw failed (%s): skipped\n", strerror(errno));
	} else {
		mw_rkey = mw->rkey;
		if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY) ||
		    bind_window(mw, bmr, bbuf + 1024, 256, &mw_rkey))
			goto out;
		printf("6. window [MR+1024, MR+1280) bound, window rkey 0x%x\n", mw_rkey);
		if (probe("6a. window rkey, inside the window", base + 1024, mw_rkey, 64,
			  IBV_WC_SUCCESS, 0))
			goto out;
		/* A bound window is invalidated before it may be bound again. */
		if (invalidate(mw_rkey))
			goto out;
		printf("6b. B invalidated window rkey 0x%x\n", mw_rkey);
		if (probe("6c. window rkey after invalidation", base + 1024, mw_rkey, 64,
			  IBV_WC_REM_ACCESS_ERR, 0))
			goto out;
		/* 6c broke both QPs. Reconnect, and bind a second, fresh window for the
		 * bounds test: a window is never bound again while bound, and a key that was
		 * handed out is never reused. */
		mw2 = ibv_alloc_mw(l.pd, IBV_MW_TYPE_2);
		if (!mw2) {
			FAIL("second ibv_alloc_mw: %s", strerror(errno));
			goto out;
		}
		old_rkey = mw_rkey;
		mw_rkey = mw2->rkey;
		if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY) ||
		    bind_window(mw2, bmr, bbuf + 1024, 256, &mw_rkey))
			goto out;
		printf("6d. a second window bound at the same place, rkey 0x%x (0x%x stays dead)\n",
		       mw_rkey, old_rkey);
		if (mw_rkey == old_rkey) {
			printf("  expected a new key\n");
			failures++;
		}
		/* Outside the window, inside the MR: do not count it as a failure either way,
		 * report what this device does. Last, because on hardware it breaks the QPs. */
		{
			struct ibv_wc wc;

			if (post_one(l.qp[0], IBV_WR_RDMA_WRITE, amr, abuf, 64, base + 2048,
				     mw_rkey, 2) ||
			    poll_wc(l.cq[0], &wc, 5000) != 1) {
				FAIL("6e: no completion");
				goto out;
			}
			enforced = wc.status == IBV_WC_REM_ACCESS_ERR;
			printf("%-52s %s\n", "6e. window rkey, outside the window, inside the MR",
			       wc_status_name(wc.status));
			printf("window bounds: %s\n",
			       enforced ? "enforced (the write outside the window was refused)" :
					  "NOT enforced by this device: only the MR's bounds are "
					  "checked (Soft-RoCE); hardware refuses this write");
		}
		/* An MR with a window bound on it cannot be deregistered; the errno is the
		 * driver's (rxe: EINVAL). */
		{
			int err = ibv_dereg_mr(bmr);

			if (err == 0) {
				bmr = NULL;
				FAIL("6f. ibv_dereg_mr succeeded with a window bound");
				goto out;
			}
			printf("6f. ibv_dereg_mr of B's MR, a window bound: refused, errno %d (%s)\n",
			       err, strerror(err));
		}
	}

	/* 7. The right rkey, inside the MR, but B's QP grants no remote write at all. */
	if (loop_connect(&l, 0, 0, LAB_RNR_RETRY))
		goto out;
	if (probe("7. B's QP grants no REMOTE_WRITE (the MR does)", base + 128, bmr->rkey, 64,
		  IBV_WC_REM_INV_REQ_ERR, 0))
		goto out;
	if (failures == 0) {
		printf("OK\n");
		ret = 0;
	}
out:
	/* Windows before the MRs they cover; MRs before their PDs; then the loop. */
	if (mw2 && ibv_dealloc_mw(mw2))
		ret = 1;
	if (mw && ibv_dealloc_mw(mw))
		ret = 1;
	if (amr && ibv_dereg_mr(amr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	if (romr && ibv_dereg_mr(romr))
		ret = 1;
	if (pd2mr && ibv_dereg_mr(pd2mr))
		ret = 1;
	if (gonemr && ibv_dereg_mr(gonemr))
		ret = 1;
	if (pd2 && ibv_dealloc_pd(pd2))
		ret = 1;
	loop_close(&l);
	free(abuf);
	free(bbuf);
	free(robuf);
	free(pd2buf);
	free(gonebuf);
	return ret;
}
