#!/bin/bash
# A rough hand check, not the bench. usage: rough-cost.sh variant redisport N PAR JAR: warm-up 10 x N, then 3 rounds of N requests (PAR keep-alive connections via curl --parallel), over distinct identities, all allowed
v=$1; P=$2; N=$3; PAR=$4; JAR=$5
: > ${TMPDIR:-/tmp}/jbm2_$v.out
java -Xmx256m -XX:+UseSerialGC -jar $JAR $v 127.0.0.1:$P 100000000 60 >> ${TMPDIR:-/tmp}/jbm2_$v.out 2>${TMPDIR:-/tmp}/jbm2_$v.err &
pid=$!
for i in $(seq 240); do grep -q PORT ${TMPDIR:-/tmp}/jbm2_$v.out && break; sleep 0.5; done
AP=$(awk '/PORT/{print $2}' ${TMPDIR:-/tmp}/jbm2_$v.out)
cfg=${TMPDIR:-/tmp}/jbm2_$v.curl; : > $cfg
for i in $(seq $N); do echo "url = \"http://127.0.0.1:$AP/\"" >> $cfg; echo 'output = "/dev/null"' >> $cfg; done
run() { curl -s --no-progress-meter --parallel --parallel-max $PAR -K $cfg -H "X-Id: id-$1" -w '%{http_code}\n' | sort | uniq -c | tr -s ' \n' ' '; }
for w in $(seq 10); do run w$w >/dev/null; done
for r in 1 2 3; do
redis-cli -p $P config resetstat >/dev/null
c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
codes=$(run m$r)
t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
st=$(redis-cli -p $P info commandstats | tr -d "\r" | grep cmdstat | grep -v -E "cmdstat_(config|info)" | sed "s/:calls=\([0-9]*\),usec=\([0-9]*\).*/ \1 calls \2 us/" | tr "\n" ";")
echo "$v par=$PAR round $r: codes [$codes] req/s $(echo "$N/($t1-$t0)"|bc), app CPU $(echo "scale=0;($c1-$c0)*10000/$N"|bc) us/req; $st"
done
kill -9 $pid
