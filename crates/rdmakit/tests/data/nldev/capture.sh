#!/bin/sh
# Runs INSIDE the lab VM (see README.md): real traffic, then resources held, then capture.
set -x
rdma dev show; rdma link show
timeout 60 ib_write_bw -d rxe_a -x 1 -D 3 >/tmp/bw_srv.txt 2>&1 &
sleep 2
timeout 60 ib_write_bw -d rxe_b -x 1 -D 3 10.1.0.1 >/tmp/bw_cli.txt 2>&1
wait
tail -3 /tmp/bw_cli.txt
# Hold a QP: an ibv_rc_pingpong server waiting for a client (QP in INIT).
timeout 40 ibv_rc_pingpong -d rxe_a -g 1 >/tmp/pp.txt 2>&1 &
# An RDMA CM listener (CM ID in LISTEN) and an SRQ server (SRQ with its QPs).
timeout 40 rping -s -a 10.1.0.1 -C 1 >/tmp/rping.txt 2>&1 &
timeout 40 ibv_srq_pingpong -d rxe_b -g 1 -p 18516 >/tmp/srq.txt 2>&1 &
sleep 2
/opt/rdma/extra/nldev_capture /tmp/cap --hex
rdma -j res show qp | sed 's/^/RDMA_RES_QP /'
rdma -j statistic show | sed 's/^/RDMA_STAT /'
rdma -j dev show | sed 's/^/RDMA_DEV /'
rdma -j res show | sed 's/^/RDMA_RES /'
for f in /sys/class/infiniband/*/ports/*/hw_counters/*; do echo "SYSFS $f $(cat $f)"; done
echo "PINGPONG_PID $(pidof ibv_rc_pingpong) RPING_PID $(pidof rping) SRQ_PID $(pidof ibv_srq_pingpong)"
rdma -j res show cm_id | sed "s/^/RDMA_RES_CM_ID /"
rdma -j res show srq | sed "s/^/RDMA_RES_SRQ /"
rdma -j res show mr | sed "s/^/RDMA_RES_MR /"
uname -r
