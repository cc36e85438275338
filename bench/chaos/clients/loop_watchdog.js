// The kafkajs worker's event-loop watchdog. A timer cannot end a process whose event loop
// never turns: a promise chain that settles without I/O, looped, keeps the loop in its
// microtask queue for ever, and every timer, signal handler and stdout write waits behind
// it (seen with kafkajs 2.2.4: a group member went silent right after its broker was
// killed, ignored SIGTERM and its own backstop timer, and was SIGKILLed 30 s later).
//
// The main thread bumps a shared counter every BEAT_MS; a worker thread checks it. When it
// has not moved for `stallMs`, the worker pauses the main thread through the inspector
// (which interrupts running JavaScript), writes one `client` error event naming where the
// main thread was, on the worker's own file descriptor 1 (the main thread's stdout queue
// never drains), then ends the process with SIGKILL.
'use strict'
const { Worker, isMainThread, workerData } = require('worker_threads')

const BEAT_MS = 100
const CHECK_MS = 250
const FRAMES_MAX = 6          // stack frames named in the event
const STEPS_MAX = 50          // steps from node's own code into the looping JavaScript
const PAUSE_WAIT_MS = 2000    // for the inspector to pause the main thread

function startWatchdog ({ name, stallMs }) {
  const beat = new Int32Array(new SharedArrayBuffer(4))
  setInterval(() => Atomics.add(beat, 0, 1), BEAT_MS).unref()
  const worker = new Worker(__filename, { workerData: { beat, name, stallMs } })
  worker.unref()
  worker.on('error', e => process.stderr.write(`loop_watchdog: ${e && e.stack ? e.stack : e}\n`))
  return worker
}

function frameText (f, urls) {
  const where = (f.url || urls.get(f.location.scriptId) || '').replace(/^.*node_modules\//, '').replace(/^file:\/\//, '')
  return `${f.functionName || '(anonymous)'} (${where}:${f.location.lineNumber + 1})`
}

function report (name, stallMs, frames) {
  const fs = require('fs')
  const text = `event loop stalled for ${stallMs} ms (a promise loop without I/O starves ` +
    `every timer); the main thread was in ${frames.length ? frames.join(' <- ') : 'unknown code'}`
  // time_ns a number, like the main thread's events (monotonic ns: below 2^53)
  const event = { event: 'client', time_ns: Number(process.hrtime.bigint()), kind: 'error',
    text: text.slice(0, 1000), count: 1 }
  const line = JSON.stringify(event) + '\n'
  try { fs.writeSync(1, line) } catch (e) {}
  try { fs.writeSync(2, `${name}: ${text}\n`) } catch (e) {}
}

function watch () {
  const { beat, name, stallMs } = workerData
  const inspector = require('inspector')
  let last = Atomics.load(beat, 0)
  let since = Date.now()
  const timer = setInterval(() => {
    const now = Atomics.load(beat, 0)
    if (now !== last) { last = now; since = Date.now(); return }
    if (Date.now() - since < stallMs) return
    clearInterval(timer)
    const hardKill = setTimeout(() => {
      report(name, stallMs, [])
      process.kill(process.pid, 'SIGKILL')
    }, PAUSE_WAIT_MS)
    const session = new inspector.Session()
    session.connectToMainThread()
    const urls = new Map()   // script id -> file (a CommonJS frame's own url is empty)
    session.on('Debugger.scriptParsed', ({ params }) => urls.set(params.scriptId, params.url))
    let steps = 0
    session.on('Debugger.paused', ({ params }) => {
      const top = params.callFrames[0]
      const url = top ? (top.url || urls.get(top.location.scriptId) || '') : ''
      if ((url === '' || url.startsWith('node:')) && steps++ < STEPS_MAX) {
        session.post('Debugger.stepInto')   // paused between two microtasks: into the next
        return
      }
      clearTimeout(hardKill)
      report(name, stallMs, params.callFrames.slice(0, FRAMES_MAX).map(f => frameText(f, urls)))
      // Only a signal ends the whole process from here: process.exit() run on the paused
      // main thread aborts now and then (SIGABRT, a core), and SIGTERM would wait for
      // the main thread's own handler.
      process.kill(process.pid, 'SIGKILL')
    })
    session.post('Debugger.enable', () => session.post('Debugger.pause'))
  }, CHECK_MS)
}

if (!isMainThread && workerData && workerData.beat) watch()

module.exports = { startWatchdog }
