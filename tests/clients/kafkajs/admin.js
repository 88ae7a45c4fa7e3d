// kafkajs as a judge of the admin API: one long-lived admin client, driven over stdin/stdout.
//
// Usage: node admin.js HOST:PORT[,HOST:PORT...]
// Each line on stdin is one JSON command {"op": <admin method>, "args": [...]}; each gets exactly one JSON line
// on stdout: {"ok": true, "result": ...} or {"ok": false, "error": <kafkajs error name>, "message": ...}.
// The process ends when stdin closes. kafkajs logs (errors only) go to stderr.
'use strict'

const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const brokers = (process.argv[2] || '').split(',').filter(Boolean)
if (brokers.length === 0) {
  process.stderr.write('usage: node admin.js HOST:PORT[,HOST:PORT...]\n')
  process.exit(2)
}

const kafka = new Kafka({
  clientId: 'kafkajs-judge',
  brokers,
  logLevel: logLevel.ERROR,
  logCreator: () => ({ namespace, level, log }) => {
    process.stderr.write(JSON.stringify({ namespace, level, message: log.message, error: log.error }) + '\n')
  },
})
const admin = kafka.admin()

const OPS = new Set([
  'listTopics',
  'createTopics',
  'deleteTopics',
  'createPartitions',
  'fetchTopicMetadata',
  'describeCluster',
  'describeConfigs',
  'alterConfigs',
])

function reply(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

async function run(command) {
  if (!OPS.has(command.op)) {
    return { ok: false, error: 'UnknownOp', message: `no such op: ${command.op}` }
  }
  try {
    const result = await admin[command.op](...(command.args || []))
    return { ok: true, result: result === undefined ? null : result }
  } catch (e) {
    return { ok: false, error: e.name || 'Error', message: e.message, type: e.type || null }
  }
}

async function main() {
  await admin.connect()
  const lines = readline.createInterface({ input: process.stdin, terminal: false })
  for await (const line of lines) {
    if (!line.trim()) continue
    let command
    try {
      command = JSON.parse(line)
    } catch (e) {
      reply({ ok: false, error: 'BadCommand', message: e.message })
      continue
    }
    reply(await run(command))
  }
  await admin.disconnect()
}

main().catch((e) => {
  process.stderr.write(`kafkajs judge failed: ${e.stack || e}\n`)
  process.exit(1)
})
