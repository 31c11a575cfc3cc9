#!/bin/bash
# instructions per round of micro3.py (valgrind): ins.sh <checkout> B SKEW
ir() { valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null /work/venv/bin/python /work/s56/micro3.py $1 $2 $3 $4 2>&1 | grep "I *refs" | tr -d ',' | awk '{print $NF}'; }
a=$(ir $1 $2 $3 0); b=$(ir $1 $2 $3 1000); echo "$1 B=$2 SKEW=$3: $(( (b - a) / 1000 )) instructions/round"
