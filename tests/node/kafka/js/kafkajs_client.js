// kafkajs against a minikafka cluster, for tests/node/kafka/drivers.py.
// Reads one JSON command on stdin, prints one JSON answer on the last line of stdout.
//   {"op": "produce", brokers, topic, partition, compression, idempotent,
//    records: [{key, value, timestamp, headers: [[k, v], ...]}]}   (bytes as hex, or null)
//     -> {"offsets": [...]}: each record's offset, from kafkajs' produce answers
//   {"op": "consume", brokers, topic, partition, start, count, timeoutMs}
//     -> {"records": [{offset, key, value, timestamp, headers}]}
// kafkajs' consumer always joins a group (the group APIs are not offered yet), so
// "consume" fetches through kafkajs' own cluster and broker objects: its connection, its
// Fetch request and its record-batch decoding, without the group.
'use strict'
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const createLogger = require('kafkajs/src/loggers').createLogger
const LoggerConsole = require('kafkajs/src/loggers/console')
const Cluster = require('kafkajs/src/cluster')
const socketFactory = require('kafkajs/src/network/socketFactory')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP,
                 snappy: CompressionTypes.Snappy, lz4: CompressionTypes.LZ4,
                 zstd: CompressionTypes.ZSTD }
// The codec packages are optional (the tests that need one skip without it).
const OPTIONAL_CODECS = [[CompressionTypes.Snappy, 'kafkajs-snappy', Codec => Codec],
                         [CompressionTypes.LZ4, 'kafkajs-lz4', Codec => new Codec().codec]]
for (const [type, pkg, make] of OPTIONAL_CODECS) {
  let Codec = null
  try { Codec = require(pkg) } catch (e) { continue }
  CompressionCodecs[type] = make(Codec)
}

// KAFKAJS_TEST_LOG=debug: kafkajs' own debug log on stderr (what it sent and got).
const LOG_LEVEL = process.env.KAFKAJS_TEST_LOG === 'debug' ? logLevel.DEBUG : logLevel.ERROR

const hex = b => (b === null || b === undefined ? null : Buffer.from(b).toString('hex'))
const unhex = s => (s === null ? null : Buffer.from(s, 'hex'))

async function produce (cmd) {
  const kafka = new Kafka({ brokers: cmd.brokers, clientId: 'kafkajs-test', logLevel: LOG_LEVEL })
  const producer = kafka.producer({ idempotent: !!cmd.idempotent, maxInFlightRequests: cmd.idempotent ? 1 : undefined })
  await producer.connect()
  const offsets = []
  try {
    // One send per record: each answer names the base offset of a one-record batch.
    for (const r of cmd.records) {
      const headers = {}
      for (const [k, v] of r.headers) {
        const value = unhex(v)
        headers[k] = headers[k] === undefined ? value : [].concat(headers[k], [value])
      }
      const message = { key: unhex(r.key), value: unhex(r.value), headers, partition: cmd.partition }
      if (r.timestamp !== null) message.timestamp = String(r.timestamp)
      const answer = await producer.send({ topic: cmd.topic, acks: -1, compression: CODECS[cmd.compression],
                                           messages: [message] })
      offsets.push(Number(answer[0].baseOffset))
    }
  } finally {
    await producer.disconnect()
  }
  return { offsets }
}

async function consume (cmd) {
  const logger = createLogger({ level: LOG_LEVEL, logCreator: LoggerConsole })
  const cluster = new Cluster({ logger, socketFactory: socketFactory(), brokers: cmd.brokers, clientId: 'kafkajs-test',
                                connectionTimeout: 5000, requestTimeout: 30000,
                                enforceRequestTimeout: true, metadataMaxAge: 300000,
                                retry: { retries: 10 }, allowAutoTopicCreation: false })
  await cluster.connect()
  const records = []
  const deadline = Date.now() + cmd.timeoutMs
  let offset = cmd.start
  try {
    await cluster.addTargetTopic(cmd.topic)
    while (records.length < cmd.count && Date.now() < deadline) {
      await cluster.refreshMetadataIfNecessary()
      const leaders = cluster.findLeaderForPartitions(cmd.topic, [cmd.partition])
      const nodeId = Object.keys(leaders)[0]
      if (nodeId === undefined) { await cluster.refreshMetadata(); continue }
      const broker = await cluster.findBroker({ nodeId })
      const response = await broker.fetch({
        replicaId: -1, isolationLevel: 1, maxWaitTime: 500, minBytes: 1, maxBytes: 10485760,
        topics: [{ topic: cmd.topic,
                   partitions: [{ partition: cmd.partition, fetchOffset: String(offset), maxBytes: 1048576 }] }]
      })
      for (const topic of response.responses) {
        for (const p of topic.partitions) {
          if (p.errorCode !== 0) throw new Error(`fetch error ${p.errorCode}`)
          for (const m of p.messages) {
            if (m.isControlRecord || Number(m.offset) < offset) continue
            const headers = []
            for (const [k, v] of Object.entries(m.headers)) {
              for (const one of Array.isArray(v) ? v : [v]) headers.push([k, hex(one)])
            }
            records.push({ offset: Number(m.offset), key: hex(m.key), value: hex(m.value),
                           timestamp: Number(m.timestamp), headers })
            offset = Number(m.offset) + 1
          }
        }
      }
    }
  } finally {
    await cluster.disconnect()
  }
  return { records }
}

async function main () {
  let input = ''
  for await (const chunk of process.stdin) input += chunk
  const cmd = JSON.parse(input)
  const answer = cmd.op === 'produce' ? await produce(cmd) : await consume(cmd)
  process.stdout.write(JSON.stringify(answer) + '\n')
}

main().catch(e => { console.error(e && e.stack ? e.stack : String(e)); process.exit(1) })
