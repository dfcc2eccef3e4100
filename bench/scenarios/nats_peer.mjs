// The NATS JetStream peer of the throughput scenarios, run by Node with the official clients
// (@nats-io/transport-node, @nats-io/jetstream). Two roles, each its own process, talking to a
// local nats-server:
//
//   node bench/scenarios/nats_peer.mjs producer <port> <config JSON>
//   node bench/scenarios/nats_peer.mjs worker   <port> <config JSON>
//
// config: { stream, subject, storage: "memory" | "file", jobs, maxAckPending, maxMessages,
//           outstanding, pollMs }.
//
// The producer creates the stream (retention workqueue, one subject) and its one durable pull
// consumer "workers" (explicit acks), prints {"ev":"ready"}, and on the command "go"
// prints {"ev":"start","t":…}, publishes `jobs` messages {"n":i} with at most `outstanding`
// publishes awaiting their PubAck at a time, then polls the stream every `pollMs` until it is
// empty (a work-queue stream deletes a message when its ack lands) and prints
// {"ev":"done","t":…,"published":…,"consumer":{…}}. On "delete" it deletes the stream and exits.
// Commands are JSON lines on stdin: {"cmd":"go"}.
//
// A worker binds to the durable consumer and consumes with `maxMessages` messages per pull
// (re-pulling at the library's default threshold), acking each message at once; the handler
// does nothing else. It prints {"ev":"ready"} once its pull is on the server, and
// {"ev":"count","acked":n} on the command "count". Times are
// performance.timeOrigin + performance.now().

import { connect } from "@nats-io/transport-node";
import {
  AckPolicy,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from "@nats-io/jetstream";

const [role, port, configText] = process.argv.slice(2);
const config = JSON.parse(configText);
const now = () => performance.timeOrigin + performance.now();
const out = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Call `handle(command)` for every JSON command line on stdin ({"cmd": …}). */
function onCommands(handle) {
  let pending = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop();
    for (const line of lines) if (line.trim()) handle(JSON.parse(line).cmd);
  });
}

const nc = await connect({ servers: `127.0.0.1:${port}` });

if (role === "producer") {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({
    name: config.stream,
    subjects: [config.subject],
    retention: RetentionPolicy.Workqueue,
    storage: config.storage === "file" ? StorageType.File : StorageType.Memory,
  });
  await jsm.consumers.add(config.stream, {
    durable_name: "workers",
    ack_policy: AckPolicy.Explicit,
    max_ack_pending: config.maxAckPending,
  });
  const js = jetstream(nc);
  const publishAll = () =>
    new Promise((resolve, reject) => {
      let next = 0;
      let inFlight = 0;
      let acked = 0;
      const pump = () => {
        while (inFlight < config.outstanding && next < config.jobs) {
          inFlight += 1;
          js.publish(config.subject, `{"n":${next++}}`).then(() => {
            inFlight -= 1;
            if (++acked === config.jobs) resolve(acked);
            else pump();
          }, reject);
        }
      };
      pump();
    });
  onCommands(async (command) => {
    try {
      if (command === "go") {
        out({ ev: "start", t: now() });
        const published = await publishAll();
        while ((await jsm.streams.info(config.stream)).state.messages > 0) {
          await sleep(config.pollMs);
        }
        const t = now();
        const info = await jsm.consumers.info(config.stream, "workers");
        out({
          ev: "done",
          t,
          published,
          consumer: {
            delivered: info.delivered.consumer_seq,
            ackFloor: info.ack_floor.stream_seq,
            ackPending: info.num_ack_pending,
            redelivered: info.num_redelivered,
          },
        });
      } else if (command === "delete") {
        await jsm.streams.delete(config.stream);
        await nc.close();
        process.exit(0);
      }
    } catch (error) {
      process.stderr.write(`${error?.stack ?? error}\n`);
      process.exit(1);
    }
  });
  out({ ev: "ready" });
} else if (role === "worker") {
  const js = jetstream(nc);
  const consumer = await js.consumers.get(config.stream, "workers");
  let acked = 0;
  await consumer.consume({
    max_messages: config.maxMessages,
    callback: (message) => {
      message.ack();
      acked += 1;
    },
  });
  await nc.flush();
  onCommands((command) => {
    if (command === "count") out({ ev: "count", acked });
  });
  out({ ev: "ready" });
} else {
  process.stderr.write(`unknown role ${role}\n`);
  process.exit(2);
}
