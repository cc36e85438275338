// One chaos/teaching workload member on kafkajs: the node side of `python -m
// bench.chaos.clients --client kafkajs` (issue 27; the contract is section 1 of the notes:
// the same flags, the same JSON-lines events on stdout). Needs NODE_PATH naming the
// node_modules that hold kafkajs.
//
//   node kafkajs_worker.js --role producer|consumer --name p0 --bootstrap H:P,... --topic T
//     [--client kafkajs] [--duration S] [--rate R] [--partition P] [--acks all|1|0]
//     [--idempotence on|off] [--group G] [--set key=value ...] [--request-timeout-ms N]
//     [--delivery-timeout-ms N] [--flush-timeout-s S]
//
// Mappings (kafkajs' own names):
//   --acks all|1|0          -> send({acks: -1|1|0}) (kafkajs' default: -1)
//   --idempotence on        -> producer({idempotent: true}); kafkajs then retries forever and
//                              serialises produce requests per broker itself (no need for
//                              maxInFlightRequests 1); it refuses acks other than -1 (exit 2)
//   --request-timeout-ms N  -> Kafka({requestTimeout: N}) and send({timeout: N}), as Java's
//                              producer puts request.timeout.ms into the Produce request
//   --delivery-timeout-ms N -> kafkajs has no bound on a send's total time (retries x
//                              backoff): the worker's own deadline; a send unanswered after N
//                              ms completes `info` (kafkajs goes on; a late answer becomes a
//                              `client` log event)
//   --set key=value         -> Kafka({...}) for the client keys (KAFKA_KEYS), `retry.X` ->
//                              Kafka({retry: {X}}), `send.X` -> send({X}), `run.X` ->
//                              consumer.run({X}), anything else -> producer()/consumer()
//   standalone consumer     -> kafkajs has no assign(): each partition is fetched through
//                              kafkajs' own Cluster and Broker objects (its connections,
//                              metadata, Fetch encoding, record-batch decoding), from the
//                              earliest offset, no group (OFFSET_OUT_OF_RANGE -> earliest)
//   --group G               -> consumer({groupId: G}), subscribe fromBeginning, run() with
//                              the client's defaults (auto-commit)
//
// fail or info: a send is `fail` only when no Produce request carrying it ever went to a
// broker, or every one that did came back with a refusal the broker makes before appending
// (refusedBeforeAppend); everything else, timeouts, dropped connections and retried
// refusals after one of those included, is `info` (the outcome is unknown).
// NOT_LEADER_OR_FOLLOWER (kafkajs: NOT_LEADER_FOR_PARTITION) and UNKNOWN_TOPIC_OR_PARTITION
// are refusals only with acks 0/1: an acks=all request that was appended and then waited
// for the ISR gets them when its broker stops leading meanwhile (Kafka's DelayedProduce:
// Partition.checkEnoughReplicasReachOffset, ReplicaManager.getPartitionOrError), and the
// new leader may have fetched the records (sweep kafkajs seed 5: 66 `fail` sends were read,
// the tail of a leader's epoch its follower had fetched before a controlled shutdown).
//
// client events: kafkajs' log lines (its logCreator): a line with a retryCount is a `retry`
// (count: failed attempts kafkajs logged, the last one before giving up included), other
// errors `error`, info/warn `log`; each text at most once a second, with its running count.
//
// Seen with kafkajs 2.2.4 (a client bug, reported as the client reports it): the idempotent
// producer rewinds a partition's sequence when a Produce request fails, a timeout included;
// if the broker did write that request, the next send reuses its sequence, the broker
// answers it as a duplicate with the first one's offset, and kafkajs acknowledges a value
// that was never written (the earlier value lands twice). A paused follower is enough:
// acks=all requests outlive --request-timeout-ms while the leader waits for the ISR.
'use strict'
const assert = require('assert')
const { startWatchdog } = require('./loop_watchdog')

const EXIT_USAGE = 2
const TEXT_MAX = 300                // characters of an error or log text kept in an event
const CLIENT_EVENT_EVERY_MS = 1000  // the same client event at most once a second (counted)
const CLIENT_EVENT_KEYS_MAX = 200   // distinct client-event texts tracked
const POLL_BACKOFF_MS = 200         // standalone consumer: pause after a failed fetch
const DISCONNECT_TIMEOUT_MS = 5000  // at the end: how long disconnect() may take
const HARD_EXIT_GRACE_MS = 5000     // beyond the flush and two disconnects: exit anyway
const LOOP_STALL_MS = 10000         // the event loop still this long: loop_watchdog ends it
const STANDALONE_DISCONNECT_MS = 1000  // ... for the standalone consumer (nothing to flush;
                                       // its disconnect waits out a fetch's maxWaitTime)
const MAX_SAFE_NS = BigInt(Number.MAX_SAFE_INTEGER)
const KAFKA_KEYS = new Set(['clientId', 'connectionTimeout', 'authenticationTimeout',
  'reauthenticationThreshold', 'requestTimeout', 'enforceRequestTimeout', 'logLevel'])
// Protocol errors a broker answers only before appending anything (Kafka's ReplicaManager
// and Log append checks): a request refused with one of these wrote nothing.
const REFUSED_BEFORE_APPEND = new Set(['NOT_ENOUGH_REPLICAS', 'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'CORRUPT_MESSAGE', 'INVALID_REQUIRED_ACKS',
  'TOPIC_AUTHORIZATION_FAILED', 'INVALID_TIMESTAMP', 'OUT_OF_ORDER_SEQUENCE_NUMBER',
  'INVALID_PRODUCER_EPOCH', 'UNSUPPORTED_FOR_MESSAGE_FORMAT'])
// ... and these too, but also after the append to an acks=all request still waiting for the
// ISR when its broker stopped leading (see the header): a refusal only with acks 0 or 1.
const REFUSED_BEFORE_APPEND_UNLESS_WAITING = new Set(['NOT_LEADER_FOR_PARTITION',
  'NOT_LEADER_OR_FOLLOWER', 'UNKNOWN_TOPIC_OR_PARTITION'])

function usage (why) {
  process.stderr.write(`kafkajs_worker: ${why}\n` +
    'usage: kafkajs_worker.js --role producer|consumer --name N --bootstrap H:P[,H:P] --topic T ' +
    '[--duration S] [--rate R] [--partition P] [--acks all|1|0] [--idempotence on|off] [--group G] ' +
    '[--set key=value]... [--request-timeout-ms N] [--delivery-timeout-ms N] [--flush-timeout-s S]\n')
  process.exit(EXIT_USAGE)
}

// ------------------------------------------------------------------ flags (pure)

const FLAGS = { '--client': 'str', '--role': 'str', '--name': 'str', '--bootstrap': 'str',
  '--topic': 'str', '--duration': 'num', '--rate': 'num', '--partition': 'int', '--acks': 'str',
  '--idempotence': 'str', '--group': 'str', '--set': 'list', '--request-timeout-ms': 'int',
  '--delivery-timeout-ms': 'int', '--flush-timeout-s': 'num',
  // the launcher's native-only flags: accepted when they ask for nothing kafkajs lacks
  '--value-format': 'str', '--schema-registry': 'str' }

function settingValue (text) {
  try { return JSON.parse(text) } catch (e) { return text }
}

// argv (after the script) -> options; throws Error(why) on bad flags.
function parseFlags (argv) {
  const o = { set: [] }
  for (let i = 0; i < argv.length; i++) {
    let flag = argv[i]
    let value
    const eq = flag.indexOf('=')
    if (flag.startsWith('--') && eq > 0) { value = flag.slice(eq + 1); flag = flag.slice(0, eq) }
    const kind = FLAGS[flag]
    if (kind === undefined) throw new Error(`unknown flag ${JSON.stringify(flag)}`)
    if (value === undefined) {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`)
      value = argv[++i]
    }
    const key = flag.slice(2).replace(/-/g, '_')
    if (kind === 'list') { o[key].push(value); continue }
    if (kind === 'str') { o[key] = value; continue }
    const n = Number(value)
    if (value.trim() === '' || !Number.isFinite(n) || n < 0 || (kind === 'int' && !Number.isInteger(n))) {
      throw new Error(`${flag} needs a ${kind === 'int' ? 'whole ' : ''}number >= 0, not ${JSON.stringify(value)}`)
    }
    o[key] = n
  }
  if (o.client !== undefined && o.client !== 'kafkajs') throw new Error(`--client ${o.client}: this worker is kafkajs'`)
  if (!['producer', 'consumer'].includes(o.role)) throw new Error(`--role must be producer or consumer, not ${o.role}`)
  for (const need of ['name', 'bootstrap', 'topic']) {
    if (!o[need]) throw new Error(`--${need} is required`)
  }
  if (o.acks !== undefined && !['all', '1', '0'].includes(o.acks)) throw new Error(`--acks must be all, 1 or 0, not ${o.acks}`)
  if (o.idempotence !== undefined && !['on', 'off'].includes(o.idempotence)) throw new Error(`--idempotence must be on or off, not ${o.idempotence}`)
  if (o.idempotence === 'on' && o.acks !== undefined && o.acks !== 'all') throw new Error('kafkajs\' idempotent producer needs --acks all')
  if (o.value_format !== undefined && o.value_format !== 'plain') throw new Error('--value-format avro is native-only')
  if (o.role === 'producer' && o.rate !== undefined && o.rate <= 0) throw new Error('--rate must be > 0')
  if (o.group !== undefined && o.partition !== undefined) throw new Error('--group and --partition: a group member cannot choose its partition in kafkajs')
  o.duration = o.duration === undefined ? 0 : o.duration
  o.rate = o.rate === undefined ? 200 : o.rate
  o.flush_timeout_s = o.flush_timeout_s === undefined ? 10 : o.flush_timeout_s
  o.brokers = o.bootstrap.split(',').map(s => s.trim()).filter(Boolean)
  if (o.brokers.length === 0) throw new Error('--bootstrap names no broker')
  // --set key=value, routed to where kafkajs takes it
  o.kafka = {}; o.client_config = {}; o.send = {}; o.run = {}
  for (const kv of o.set) {
    const eq = kv.indexOf('=')
    if (eq <= 0) throw new Error(`--set needs key=value, not ${JSON.stringify(kv)}`)
    const key = kv.slice(0, eq)
    const value = settingValue(kv.slice(eq + 1))
    if (KAFKA_KEYS.has(key)) o.kafka[key] = value
    else if (key.startsWith('retry.')) { o.kafka.retry = o.kafka.retry || {}; o.kafka.retry[key.slice(6)] = value }
    else if (key.startsWith('send.')) o.send[key.slice(5)] = value
    else if (key.startsWith('run.')) o.run[key.slice(4)] = value
    else o.client_config[key] = value
  }
  if (o.request_timeout_ms !== undefined) {
    o.kafka.requestTimeout = o.request_timeout_ms
    o.send.timeout = o.request_timeout_ms
  }
  if (o.acks !== undefined) o.send.acks = { all: -1, 1: 1, 0: 0 }[o.acks]
  if (o.idempotence !== undefined) o.client_config.idempotent = o.idempotence === 'on'
  return o
}

// What the worker set, in kafkajs' spelling (the start event's settings).
function settingsOf (o) {
  const s = {}
  for (const [k, v] of Object.entries(o.kafka)) s[k] = v
  for (const [k, v] of Object.entries(o.client_config)) s[k] = v
  for (const [k, v] of Object.entries(o.send)) s[`send.${k}`] = v
  for (const [k, v] of Object.entries(o.run)) s[`run.${k}`] = v
  if (o.partition !== undefined) s.partition = o.partition
  if (o.delivery_timeout_ms !== undefined) s['delivery.timeout.ms'] = `${o.delivery_timeout_ms} (worker deadline: kafkajs has none)`
  if (o.role === 'consumer') {
    s.assignment = o.group === undefined
      ? 'manual: kafkajs has no assign(); fetch per partition through kafkajs Cluster/Broker, no group'
      : 'subscribe'
    if (o.group !== undefined) { s.groupId = o.group; s.fromBeginning = true }
    else s.offset = 'earliest'
  }
  return s
}

// ------------------------------------------------------------------ events

function nowNs () {
  const t = process.hrtime.bigint()
  assert(t <= MAX_SAFE_NS, 'monotonic ns past 2^53: the machine has been up > 104 days')
  return Number(t)
}

const b64 = v => (v === null || v === undefined ? null : Buffer.from(v).toString('base64'))
const errorText = e => {
  if (!e) return 'Error: unknown'
  let text = `${e.name || 'Error'}: ${e.message}`
  if (e.cause && e.cause !== e && e.cause.message && !text.includes(e.cause.message)) {
    text += ` (cause ${e.cause.name}: ${e.cause.message})`
  }
  return text.slice(0, TEXT_MAX)
}

class Emitter {
  constructor (name) {
    this.name = name
    this.ok = 0        // sends acknowledged + records read
    this.errors = 0    // sends failed or unknown, polls that raised
    this.ended = false
    this.logged = new Map()  // client-event key -> {count, last, sentCount, kind, text}
  }

  write (event) {
    if (this.ended) return  // nothing follows `end`
    process.stdout.write(JSON.stringify(event) + '\n')
  }

  start (role, settings) {
    const version = require('kafkajs/package.json').version
    this.write({ event: 'start', client: 'kafkajs', version: `${version} (node ${process.versions.node})`,
      role, name: this.name, settings })
  }

  op (type, f, fields = {}, timeNs = nowNs()) {
    assert(['invoke', 'ok', 'fail', 'info'].includes(type), type)
    if (type === 'fail' || type === 'info') this.errors++
    else if (type === 'ok' && f === 'send') this.ok++
    else if (type === 'ok' && f === 'poll') this.ok += fields.reads.length
    const event = { event: 'op', process: this.name, type, f, time_ns: timeNs }
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined || v === null) continue
      event[k] = k === 'error' ? String(v).slice(0, TEXT_MAX) : v
    }
    this.write(event)
  }

  // A client event; the same key at most once per CLIENT_EVENT_EVERY_MS, with its count.
  client (kind, key, text) {
    assert(['error', 'retry', 'log'].includes(kind), kind)
    if (!this.logged.has(key) && this.logged.size >= CLIENT_EVENT_KEYS_MAX) key = `${kind}: other`
    const entry = this.logged.get(key) || { count: 0, last: 0, sent: 0, kind }
    this.logged.set(key, entry)
    entry.count++
    entry.text = String(text).slice(0, TEXT_MAX)
    const now = Date.now()
    if (now - entry.last >= CLIENT_EVENT_EVERY_MS) {
      entry.last = now
      entry.sent = entry.count
      this.write({ event: 'client', time_ns: nowNs(), kind, text: entry.text, count: entry.count })
    }
  }

  end () {
    for (const entry of this.logged.values()) {  // the counts not yet reported
      if (entry.sent < entry.count) {
        this.write({ event: 'client', time_ns: nowNs(), kind: entry.kind, text: entry.text, count: entry.count })
      }
    }
    this.write({ event: 'end', time_ns: nowNs(), ok: this.ok, errors: this.errors })
    this.ended = true
  }
}

// kafkajs' logCreator: log lines become client events (retries counted under one key).
function logCreatorFor (em) {
  const { logLevel } = require('kafkajs')
  return () => ({ namespace, level, log }) => {
    const { message, retryCount, error } = log
    let text = namespace ? `${namespace}: ${message}` : String(message)
    if (error && !String(message).includes(String(error))) text += ` (${error})`
    if (retryCount !== undefined && level <= logLevel.WARN) em.client('retry', 'retry', text)
    else if (level === logLevel.ERROR) em.client('error', `error: ${text}`, text)
    else if (level <= logLevel.INFO) em.client('log', `log: ${text}`, text)
  }
}

// ------------------------------------------------------------------ stopping

function stopper (o) {
  let resolve
  const stopped = new Promise(r => { resolve = r })
  const state = { stopping: false, stopped }
  const stop = () => {
    if (state.stopping) return
    state.stopping = true
    resolve()
    // A backstop: a kafkajs call that never settles (connect() or disconnect() with its
    // brokers gone) must not keep the worker alive; seen once, an orphaned group member
    // spinning for an hour after its run was interrupted.
    setTimeout(() => {
      process.stderr.write('kafkajs_worker: still running after the stop, exiting\n')
      process.exit(1)
    }, o.flush_timeout_s * 1000 + 2 * DISCONNECT_TIMEOUT_MS + HARD_EXIT_GRACE_MS).unref()
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  if (o.duration > 0) {
    setTimeout(stop, o.duration * 1000)
  } else {
    process.stdin.on('end', stop)
    process.stdin.on('error', stop)
    process.stdin.resume()
  }
  return state
}

const sleep = (ms, state) => new Promise(resolve => {
  const timer = setTimeout(resolve, ms)
  if (state) state.stopped.then(() => { clearTimeout(timer); resolve() })
})

const withTimeout = (promise, ms) => Promise.race([promise.catch(() => {}), sleep(ms)])

// ------------------------------------------------------------------ kafkajs internals

// Did a Produce request that failed with `error` (sent with `acks`, kafkajs' default -1)
// certainly write nothing? (pure)
function refusedBeforeAppend (error, acks) {
  if (!error || error.name !== 'KafkaJSProtocolError') return false
  if (REFUSED_BEFORE_APPEND.has(error.type)) return true
  const waited = acks === undefined || acks === null || Number(acks) === -1
  return !waited && REFUSED_BEFORE_APPEND_UNLESS_WAITING.has(error.type)
}

// A send's end when kafkajs gives up on it: `fail` only when certainly not written. (pure)
const failedSendType = track => (track.attempts === 0 || !track.maybe ? 'fail' : 'info')

// Every Produce request kafkajs sends: which of our sends it carried and how it ended.
// `tracks`: value-string -> track ({attempts, maybe, partition}) the producer fills.
function watchProduce (Broker, tracks) {
  const original = Broker.prototype.produce
  Broker.prototype.produce = async function (request) {
    const carried = []
    for (const { partitions } of request.topicData || []) {
      for (const { partition, messages } of partitions) {
        for (const m of messages) {
          const track = tracks.get(Buffer.from(m.value).toString())
          if (track) { track.attempts++; track.partition = partition; carried.push(track) }
        }
      }
    }
    try {
      return await original.call(this, request)
    } catch (e) {
      if (!refusedBeforeAppend(e, request.acks)) for (const track of carried) track.maybe = true
      throw e
    }
  }
}

// The generation of the last JoinGroup answer (kafkajs' events do not carry it).
function watchJoin (Broker, seen) {
  const original = Broker.prototype.joinGroup
  Broker.prototype.joinGroup = async function (request) {
    const answer = await original.call(this, request)
    if (answer && answer.generationId !== undefined) seen.generation = Number(answer.generationId)
    return answer
  }
}

// kafkajs 2.2.4's FetchManager restarts its fetchers after a KafkaJSFetcherRebalanceError
// (the brokers leading the assigned partitions changed: a leader killed or back) without
// asking whether stop() came meanwhile; stop() has already stopped the old set, so the new
// one runs on. Its fetch() answers [] at once, with no I/O, once the runner has stopped,
// and the fetcher loops on it in the microtask queue: no timer, signal or stdout write
// runs again (seen: a group member silent after disconnect() during a leader's return,
// SIGKILLed 30 s after its duration; loop_watchdog named the frame). Patched here, not in
// kafkajs: a stopped runner's fetch() waits a little before answering [], so such an
// orphan idles instead of starving the process until the worker exits.
const STOPPED_RUNNER_FETCH_WAIT_MS = 100

function idleStoppedRunner () {
  const Runner = require('kafkajs/src/consumer/runner')
  const original = Runner.prototype.fetch
  Runner.prototype.fetch = async function (nodeId) {
    if (!this.running) {
      await sleep(STOPPED_RUNNER_FETCH_WAIT_MS)
      return []
    }
    return original.call(this, nodeId)
  }
}

// ------------------------------------------------------------------ producer

async function produce (o, em, state, kafka, Broker) {
  const { Partitioners } = require('kafkajs')
  const tracks = new Map()
  watchProduce(Broker, tracks)
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, ...o.client_config })
  while (!state.stopping) {
    try { await producer.connect(); break } catch (e) {
      em.client('error', `connect: ${e.name}`, `connect: ${errorText(e)}`)
      await sleep(POLL_BACKOFF_MS * 5, state)
    }
  }
  const pending = new Set()
  const complete = (track, type, fields) => {
    if (track.done) return false
    track.done = true
    tracks.delete(track.key)
    em.op(type, 'send', { value: b64(track.value), ...fields })
    return true
  }
  let seq = 0     // the value's number: unique in this worker
  let n = 0       // sends since t0, for the rate
  let t0 = Date.now()
  while (!state.stopping) {
    const due = t0 + (n * 1000) / o.rate
    const wait = due - Date.now()
    if (wait > 0) { await sleep(wait, state); continue }
    if (wait < -1000) { t0 = Date.now(); n = 0; continue }  // far behind: no burst
    const value = Buffer.from(`${o.name}-${seq++}`)
    n++
    const track = { key: value.toString(), value, attempts: 0, maybe: false, partition: o.partition, done: false }
    tracks.set(track.key, track)
    em.op('invoke', 'send', { value: b64(value) })
    const message = { value }
    if (o.partition !== undefined) message.partition = o.partition
    let deadline = null
    const sent = producer.send({ topic: o.topic, ...o.send, messages: [message] }).then(meta => {
      const m = (meta && meta[0]) || {}
      const partition = m.partition !== undefined ? m.partition : (track.partition === undefined ? -1 : Number(track.partition))
      const offset = m.baseOffset !== undefined ? Number(m.baseOffset) : -1  // acks 0: none
      if (!complete(track, 'ok', { partition, offset })) {
        em.client('log', 'late', `late ok after the worker's deadline: ${track.key} at ${partition}/${offset}`)
      }
    }, e => {
      if (!complete(track, failedSendType(track), { error: errorText(e) })) {
        em.client('log', 'late', `late error after the worker's deadline: ${track.key}: ${errorText(e)}`)
      }
    }).finally(() => { pending.delete(sent); if (deadline) clearTimeout(deadline) })
    pending.add(sent)
    if (o.delivery_timeout_ms !== undefined) {
      deadline = setTimeout(() => complete(track, 'info', {
        error: `DeliveryTimeout: no answer from kafkajs within ${o.delivery_timeout_ms} ms (worker deadline; kafkajs' send goes on)` }),
      o.delivery_timeout_ms)
    }
  }
  // stop: wait for the outstanding sends, then give up on the rest (unknown outcome)
  await withTimeout(Promise.allSettled(Array.from(pending)), o.flush_timeout_s * 1000)
  for (const track of Array.from(tracks.values())) {
    complete(track, 'info', { error: `FlushTimeout: no answer from kafkajs within ${o.flush_timeout_s} s of the stop` })
  }
  await withTimeout(producer.disconnect(), DISCONNECT_TIMEOUT_MS)
}

// ------------------------------------------------------------------ standalone consumer

async function consumeStandalone (o, em, state, kafka) {
  const Cluster = require('kafkajs/src/cluster')
  const socketFactory = require('kafkajs/src/network/socketFactory')
  const filterAborted = require('kafkajs/src/consumer/filterAbortedMessages')
  const c = o.client_config
  const isolationLevel = c.readUncommitted ? 0 : 1  // kafkajs consumer default: read committed
  // kafkajs' Kafka() defaults (a Cluster built directly has none: a missing connectionTimeout
  // times every connection out at once), then what --set and the flags said
  const k = { connectionTimeout: 1000, authenticationTimeout: 10000, requestTimeout: 30000,
    enforceRequestTimeout: true, ...o.kafka }
  const cluster = new Cluster({ logger: kafka.logger(), socketFactory: socketFactory(), brokers: o.brokers,
    clientId: k.clientId || `minikafka-chaos-${o.name}`, connectionTimeout: k.connectionTimeout,
    authenticationTimeout: k.authenticationTimeout, requestTimeout: k.requestTimeout,
    enforceRequestTimeout: k.enforceRequestTimeout, retry: k.retry,
    metadataMaxAge: c.metadataMaxAge === undefined ? 300000 : c.metadataMaxAge,
    allowAutoTopicCreation: false, isolationLevel })
  const maxWaitTime = c.maxWaitTimeInMs === undefined ? 5000 : c.maxWaitTimeInMs
  const poll = async (p, offset) => {  // -> [reads, next offset]
    await cluster.refreshMetadataIfNecessary()
    const nodeId = Object.keys(cluster.findLeaderForPartitions(o.topic, [p]))[0]
    if (nodeId === undefined) { await cluster.refreshMetadata(); throw new Error(`no leader known for partition ${p}`) }
    const broker = await cluster.findBroker({ nodeId })
    const answer = await broker.fetch({ replicaId: -1, isolationLevel, maxWaitTime, minBytes: c.minBytes || 1,
      maxBytes: c.maxBytes || 10485760,
      topics: [{ topic: o.topic, partitions: [{ partition: p, fetchOffset: String(offset),
        maxBytes: c.maxBytesPerPartition || 1048576 }] }] })
    const reads = []
    for (const t of answer.responses) {
      for (const part of t.partitions) {
        const kept = new Set(filterAborted({ messages: part.messages, abortedTransactions: part.abortedTransactions }))
        for (const m of part.messages) {
          const at = Number(m.offset)
          if (at < offset) continue
          offset = at + 1
          if (!m.isControlRecord && kept.has(m)) reads.push([p, at, b64(m.value)])
        }
      }
    }
    return [reads, offset]
  }
  const follow = async p => {
    let offset = null
    while (!state.stopping) {
      const invoked = nowNs()
      try {
        if (offset === null) {
          const [{ partitions }] = await cluster.fetchTopicsOffset([{ topic: o.topic, partitions: [{ partition: p }], fromBeginning: true }])
          offset = Number(partitions[0].offset)
        }
        const [reads, next] = await poll(p, offset)
        offset = next
        if (reads.length && !em.ended) { em.op('invoke', 'poll', {}, invoked); em.op('ok', 'poll', { reads }) }
      } catch (e) {
        if (state.stopping) break
        em.op('invoke', 'poll', {}, invoked)
        em.op('info', 'poll', { error: errorText(e) })
        if (e.name === 'KafkaJSOffsetOutOfRange') {
          em.client('log', `reset ${p}`, `partition ${p}: offset ${offset} out of range, from the earliest again`)
          offset = null
        } else {
          await cluster.refreshMetadata().catch(() => {})
        }
        await sleep(POLL_BACKOFF_MS, state)
      }
    }
  }
  let partitions = null
  while (!state.stopping && partitions === null) {
    try {
      await cluster.connect()
      await cluster.addTargetTopic(o.topic)
      const known = cluster.findTopicPartitionMetadata(o.topic).map(m => m.partitionId)
      if (known.length) partitions = o.partition === undefined ? known.sort((a, b) => a - b) : [o.partition]
      else await sleep(POLL_BACKOFF_MS, state)
    } catch (e) {
      em.client('error', `connect: ${e.name}`, `connect: ${errorText(e)}`)
      await sleep(POLL_BACKOFF_MS * 5, state)
    }
  }
  // at the stop, a fetch still waiting at the broker (maxWaitTime) is not waited for
  if (partitions !== null) await Promise.race([Promise.all(partitions.map(follow)), state.stopped])
  await withTimeout(cluster.disconnect(), STANDALONE_DISCONNECT_MS)
}

// ------------------------------------------------------------------ group consumer

// Whether the stop came before `promise` settled; a rejection before the stop is thrown.
// A promise still pending at the stop is left to settle alone (the race handles its
// rejection, so none goes unhandled).
async function stoppedFirst (promise, state) {
  const stopped = Symbol('stopped')
  return (await Promise.race([promise, state.stopped.then(() => stopped)])) === stopped
}

// What a GROUP_JOIN (kafkajs: a JoinGroup + SyncGroup round done) changes, given the
// partitions owned before and the new assignment: those no longer assigned are revoked,
// and *every* assigned partition is a new ownership, a kept one too: kafkajs builds a new
// OffsetManager at each SyncGroup, so each partition restarts at the group's committed
// offset and reads again what was read but not committed. kafkajs rejoins without a
// REBALANCING event too, e.g. after a Fetch answered NOT_LEADER (recoverFromFetch:
// refreshMetadata, then joinAndSync; sweep kafkajs seed 3: c1 read partition 1 from 5978
// again after 6007). (pure)
function joinChanges (owned, assignment) {
  const now = new Set(assignment.map(Number))
  const byNumber = (a, b) => a - b
  return { revoked: Array.from(owned).filter(p => !now.has(p)).sort(byNumber),
    assigned: Array.from(now).sort(byNumber) }
}

async function consumeGroup (o, em, state, kafka, Broker) {
  const seen = { generation: -1 }
  watchJoin(Broker, seen)
  idleStoppedRunner()
  const consumer = kafka.consumer({ groupId: o.group, ...o.client_config })
  const owned = new Set()
  const ownership = (type, partitions, extra = {}) => {
    const changed = partitions.filter(p => (type === 'assign') !== owned.has(p)).sort((a, b) => a - b)
    for (const p of changed) { if (type === 'assign') owned.add(p); else owned.delete(p) }
    if (changed.length) em.op('ok', type, { partitions: changed, ...extra })
  }
  const { GROUP_JOIN, REBALANCING, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, e => {
    const { revoked, assigned } = joinChanges(owned, (e.payload.memberAssignment || {})[o.topic] || [])
    ownership('revoke', revoked)
    for (const p of assigned) owned.delete(p)  // a new ownership even of a kept partition
    ownership('assign', assigned, { member: e.payload.memberId, generation: seen.generation })
  })
  // kafkajs rebalances eagerly: it stops fetching and gives up every partition to rejoin
  consumer.on(REBALANCING, () => ownership('revoke', Array.from(owned)))
  consumer.on(COMMIT_OFFSETS, e => {
    const offsets = []
    for (const t of e.payload.topics) {
      if (t.topic !== o.topic) continue
      for (const p of t.partitions) offsets.push([Number(p.partition), Number(p.offset)])
    }
    if (offsets.length) em.op('ok', 'commit', { offsets: offsets.sort((a, b) => a[0] - b[0]) })
  })
  consumer.on(CRASH, e => {
    em.client('error', `crash: ${e.payload.error && e.payload.error.name}`,
      `crash (${e.payload.restart ? 'kafkajs restarts the consumer' : 'no restart'}): ${errorText(e.payload.error)}`)
    ownership('revoke', Array.from(owned), { error: 'lost' })  // the crash left the group
  })
  // Each step ends at the stop: run() settles only once the group's join is done, and a
  // member that does not rejoin holds that up to its rebalance timeout (60 s). Seen: the
  // other member, its fetch loop waiting on a killed broker, sent no heartbeat (kafkajs
  // sends them from that loop), so it never heard of the rebalance; this worker, still
  // joining at its duration, waited until the stop's backstop ended it with exit 1.
  while (!state.stopping) {
    try {
      if (await stoppedFirst(consumer.connect(), state)) break
      if (await stoppedFirst(consumer.subscribe({ topics: [o.topic], fromBeginning: true }), state)) break
      await stoppedFirst(consumer.run({
        ...o.run,
        eachBatch: async ({ batch }) => {
          const invoked = nowNs()
          const reads = batch.messages.map(m => [batch.partition, Number(m.offset), b64(m.value)])
          if (reads.length && !em.ended) { em.op('invoke', 'poll', {}, invoked); em.op('ok', 'poll', { reads }) }
        }
      }), state)
      break
    } catch (e) {
      em.client('error', `start: ${e.name}`, `start: ${errorText(e)}`)
      await withTimeout(consumer.disconnect(), DISCONNECT_TIMEOUT_MS)
      await sleep(POLL_BACKOFF_MS * 5, state)
    }
  }
  await state.stopped
  await withTimeout(consumer.disconnect(), DISCONNECT_TIMEOUT_MS)
  ownership('revoke', Array.from(owned))
}

// ------------------------------------------------------------------ main

async function main () {
  let o
  try { o = parseFlags(process.argv.slice(2)) } catch (e) { usage(e.message) }
  let kafkajs
  try { kafkajs = require('kafkajs') } catch (e) {
    process.stderr.write(`kafkajs_worker: kafkajs is not installed where NODE_PATH points (${process.env.NODE_PATH || 'unset'})\n`)
    process.exit(1)
  }
  const Broker = require('kafkajs/src/broker')
  const em = new Emitter(o.name)
  startWatchdog({ name: `kafkajs_worker ${o.name}`, stallMs: LOOP_STALL_MS })
  const state = stopper(o)
  em.start(o.role, settingsOf(o))
  const kafka = new kafkajs.Kafka({ clientId: `minikafka-chaos-${o.name}`, brokers: o.brokers,
    logLevel: kafkajs.logLevel.INFO, logCreator: logCreatorFor(em), ...o.kafka })
  if (o.role === 'producer') await produce(o, em, state, kafka, Broker)
  else if (o.group === undefined) await consumeStandalone(o, em, state, kafka)
  else await consumeGroup(o, em, state, kafka, Broker)
  em.end()
  process.exit(0)
}

if (require.main === module) {
  main().catch(e => {
    process.stderr.write(`kafkajs_worker: ${e && e.stack ? e.stack : e}\n`)
    process.exit(1)
  })
}

module.exports = { parseFlags, settingsOf, refusedBeforeAppend, failedSendType, watchProduce, joinChanges,
  idleStoppedRunner }
