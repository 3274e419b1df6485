// Drive npm `kafka-rest` (Confluent's Node.js wrapper for REST Proxy v1) against a REST Proxy: produce COUNT
// records to TOPIC through Topic.produce, then read them back through the consumer API (join a group as a
// consumer instance, subscribe a stream to the topic, read until COUNT records arrived), commit and shut the
// instance down.
//
// Usage: node roundtrip.js URL TOPIC GROUP COUNT. Prints one JSON object on stdout: the produce results, the
// records read (key and value decoded from base64 to UTF-8), the commit result, every HTTP exchange the library
// made (`trace`) and `error` (null on success). Exit status 0 on success, 1 otherwise. `kafka-rest` is found
// through NODE_PATH (tests/compat/install.py installs it into the cache).
"use strict";

const http = require("http");
const KafkaRest = require("kafka-rest");

const [url, topic, group, countArg] = process.argv.slice(2);
const COUNT = Number(countArg);
const BATCH = 10; // records per produce request
const DEADLINE_MS = 60000;

const result = { produced: [], consumed: [], commit: null, shutdown: null, trace: [], error: null };

// Observe every request the library makes and its answer; nothing is changed.
const originalRequest = http.request;
http.request = function (options, callback) {
  const entry = {
    method: options.method,
    path: options.path,
    headers: Object.assign({}, options.headers),
    body: null,
    status: null,
    content_type: null,
    response: "",
  };
  result.trace.push(entry);
  const req = originalRequest.call(http, options, function (res) {
    entry.status = res.statusCode;
    entry.content_type = res.headers["content-type"] || null;
    res.on("data", function (chunk) {
      if (entry.response.length < 2000) entry.response += chunk;
    });
    callback(res);
  });
  const write = req.write;
  req.write = function (chunk) {
    entry.body = (entry.body || "") + chunk;
    return write.apply(req, arguments);
  };
  return req;
};

let finished = false;
function finish(err) {
  if (finished) return;
  finished = true;
  if (err) result.error = describe(err);
  process.stdout.write(JSON.stringify(result));
  process.exit(err ? 1 : 0);
}

function describe(err) {
  // The library's APIError carries the answer; its stack is the module's, so say what was answered instead.
  if (err && err.name === "APIError") return "APIError: HTTP " + err.status + " " + JSON.stringify(err.data);
  return String(err && err.stack ? err.stack : err);
}

setTimeout(function () {
  finish(new Error("deadline: " + result.consumed.length + " of " + COUNT + " records read"));
}, DEADLINE_MS).unref();

const kafka = new KafkaRest({ url: url });

function produce(start, done) {
  if (start >= COUNT) return done();
  const batch = [];
  for (let n = start; n < Math.min(start + BATCH, COUNT); n++) {
    batch.push({ key: "key-" + n, value: JSON.stringify({ n: n, text: "record " + n }) });
  }
  kafka.topic(topic).produce(batch, function (err, res) {
    if (err) return finish(err);
    for (const offset of res.offsets) result.produced.push(offset);
    produce(start + BATCH, done);
  });
}

function consume() {
  const config = { format: "binary", "auto.offset.reset": "smallest", "auto.commit.enable": "false" };
  kafka.consumer(group).join(config, function (err, instance) {
    if (err) return finish(err);
    const stream = instance.subscribe(topic, { requestDelay: 50 });
    let closing = false;
    stream.on("data", function (msgs) {
      for (const msg of msgs) {
        result.consumed.push({
          key: msg.key === null ? null : msg.key.toString("utf8"),
          value: msg.value === null ? null : msg.value.toString("utf8"),
          partition: msg.partition,
          offset: msg.offset,
        });
      }
      if (result.consumed.length >= COUNT && !closing) {
        closing = true;
        instance.commit(function (err, committed) {
          if (err) return finish(err);
          result.commit = committed;
          instance.shutdown(function (err) {
            if (err) return finish(err);
            result.shutdown = "ok";
            finish(null);
          });
        });
      }
    });
    stream.on("error", finish);
  });
}

produce(0, consume);
