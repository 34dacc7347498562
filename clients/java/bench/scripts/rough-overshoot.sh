#!/bin/bash
# A rough hand check, not the bench. usage: rough-overshoot.sh variant redisport JAR: 4 apps, limit 20 per 10 s, one identity, 4 x 150 requests (each app 2 connections), count 200s
v=$1; P=$2; JAR=$3; pids=(); ports=(); curls=()
for a in 1 2 3 4; do
  : > /tmp/jbo_$v$a.out
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar $JAR $v 127.0.0.1:$P 20 10 >> /tmp/jbo_$v$a.out 2>/tmp/jbo_$v$a.err &
  pids+=($!)
done
for a in 1 2 3 4; do for i in $(seq 240); do grep -q PORT /tmp/jbo_$v$a.out && break; sleep 0.5; done; ports+=($(awk '/PORT/{print $2}' /tmp/jbo_$v$a.out)); done
id="one-$v-$RANDOM"
t0=$(date +%s.%N)
for p in "${ports[@]}"; do
  cfg=/tmp/jbo_$v$p.curl; : > $cfg
  for i in $(seq 150); do echo "url = \"http://127.0.0.1:$p/\"" >> $cfg; echo 'output = "/dev/null"' >> $cfg; done
  curl -s --no-progress-meter --max-time 10 --parallel --parallel-max 2 -K $cfg -H "X-Id: $id" -w '%{http_code}\n' > /tmp/jbo_$v$p.codes &
  curls+=($!)
done
wait "${curls[@]}"
t1=$(date +%s.%N)
cat $(for p in "${ports[@]}"; do echo /tmp/jbo_$v$p.codes; done) | sort | uniq -c | tr -s ' \n' ' '; echo " <- $v: 4 apps x 150 requests on one identity in $(echo "$t1-$t0"|bc) s, limit 20 per 10 s"
for pid in "${pids[@]}"; do kill -9 $pid; done
