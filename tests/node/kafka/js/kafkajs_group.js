// One kafkajs consumer-group member, for tests/node/kafka/test_groups_*.py.
// Argument: one JSON object {brokers, group, topic, sessionTimeout, heartbeatInterval}.
// Subscribes from the beginning, auto-commits (every 100 ms and on rebalance), reads
// until SIGTERM, then disconnects (leaves the group) and exits 0.
// Prints JSON lines on stdout, the same events as bench/perf/kafka_groups/member.py:
//   {"t", "ev": "ready"} | {"ev": "assign", "parts": [...]} (after each join; [] when a
//   rebalance starts) | {"ev": "rec", "p", "o", "v"} | {"ev": "commit", "p", "o"} |
//   {"ev": "error", "msg"} | {"ev": "closed"}
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const cmd = JSON.parse(process.argv[2])
const emit = o => process.stdout.write(JSON.stringify({ t: Date.now() / 1000, ...o }) + '\n')

async function main () {
  const kafka = new Kafka({ brokers: cmd.brokers, clientId: 'kafkajs-group', logLevel: logLevel.NOTHING,
                            retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 } })
  const consumer = kafka.consumer({ groupId: cmd.group, sessionTimeout: cmd.sessionTimeout,
                                    heartbeatInterval: cmd.heartbeatInterval,
                                    rebalanceTimeout: 30000, metadataMaxAge: 2000,
                                    // kafkajs heartbeats between fetches: keep them short.
                                    maxWaitTimeInMs: 100, allowAutoTopicCreation: false })
  const { GROUP_JOIN, REBALANCING, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, e => emit({ ev: 'assign', parts: e.payload.memberAssignment[cmd.topic] || [] }))
  consumer.on(REBALANCING, () => emit({ ev: 'assign', parts: [] }))
  consumer.on(CRASH, e => emit({ ev: 'error', msg: String(e.payload.error) }))
  consumer.on(COMMIT_OFFSETS, e => {
    for (const t of e.payload.topics) {
      for (const p of t.partitions) emit({ ev: 'commit', p: p.partition, o: Number(p.offset) })
    }
  })
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await consumer.disconnect()
    emit({ ev: 'closed' })
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  await consumer.connect()
  await consumer.subscribe({ topics: [cmd.topic], fromBeginning: true })
  emit({ ev: 'ready' })
  await consumer.run({
    autoCommit: true, autoCommitInterval: 100,
    eachMessage: async ({ partition, message }) => {
      emit({ ev: 'rec', p: partition, o: Number(message.offset),
             v: message.value === null ? null : message.value.toString() })
    }
  })
}

main().catch(e => { emit({ ev: 'error', msg: e && e.stack ? e.stack : String(e) }); process.exit(1) })
