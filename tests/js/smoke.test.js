// Smoke tests of the official JS SDK (@azure/storage-queue) against the real
// hematite binary: the main flows a JS application uses.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { QueueServiceClient, StorageSharedKeyCredential, generateAccountSASQueryParameters,
         AccountSASPermissions, AccountSASResourceTypes, AccountSASServices } from "@azure/storage-queue";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const bin = process.env.HEMATITE_BIN ?? join(root, "target", "debug", "hematite");
const ACCOUNT = "devstoreaccount1";
const KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
// HEMATITE_JS_TLS=1: the server serves HTTPS with the test certificate;
// Node trusts its CA through NODE_EXTRA_CA_CERTS (set by tools/test-all).
const tls = !["", "0", undefined].includes(process.env.HEMATITE_JS_TLS);
const scheme = tls ? "https" : "http";
let server, port, svc;

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// The server's data directory: removed once it has stopped, so that every
// run does not leave a log segment behind in the temporary directory.
let data;

before(async () => {
  port = await freePort();
  data = mkdtempSync(join(tmpdir(), "hematite-js-"));
  const certs = join(root, "tests", "certs");
  const tlsArgs = tls ? ["--cert", join(certs, "server.pem"), "--key", join(certs, "server.key")] : [];
  server = spawn(bin, ["--addr", `127.0.0.1:${port}`, "--data-dir", data, ...tlsArgs], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise((resolve, reject) => {
    server.stdout.on("data", (d) => { if (d.toString().includes("hematite ready")) resolve(); });
    server.on("exit", (code) => reject(new Error(`hematite exited with ${code}`)));
  });
  const cs = `DefaultEndpointsProtocol=${scheme};AccountName=${ACCOUNT};AccountKey=${KEY};QueueEndpoint=${scheme}://127.0.0.1:${port}/${ACCOUNT};`;
  svc = QueueServiceClient.fromConnectionString(cs);
});

after(async () => {
  const exited = new Promise((resolve) => server.on("exit", resolve));
  server.kill("SIGTERM");
  const code = await exited;
  rmSync(data, { recursive: true, force: true });
  assert.equal(code, 0);
});

test("create, createIfNotExists, metadata, list, delete", async () => {
  const q = svc.getQueueClient("jsqueue1");
  await q.create({ metadata: { Team: "js" } });
  const again = await q.createIfNotExists({ metadata: { Team: "js" } });
  assert.equal(again.succeeded, false);
  const props = await q.getProperties();
  assert.deepEqual(props.metadata, { team: "js" });
  const names = [];
  for await (const item of svc.listQueues({ prefix: "jsqueue" })) names.push(item.name);
  assert.deepEqual(names, ["jsqueue1"]);
  await q.delete();
  assert.equal(await q.exists(), false);
});

test("send, peek, receive, update (empty body), delete", async () => {
  const q = svc.getQueueClient("jsqueue2");
  await q.create();
  const sent = await q.sendMessage("hello <js> & friends");
  assert.ok(sent.messageId && sent.popReceipt);
  const peeked = await q.peekMessages({ numberOfMessages: 5 });
  assert.equal(peeked.peekedMessageItems[0].messageText, "hello <js> & friends");
  const got = await q.receiveMessages({ numberOfMessages: 5, visibilityTimeout: 30 });
  const m = got.receivedMessageItems[0];
  assert.equal(m.dequeueCount, 1);
  // JS sends Content-Type: application/xml with an empty body for visibility-only updates
  const upd = await q.updateMessage(m.messageId, m.popReceipt, undefined, 0);
  assert.ok(upd.popReceipt && upd.nextVisibleOn);
  const again = await q.receiveMessages();
  assert.equal(again.receivedMessageItems[0].messageText, "hello <js> & friends");
  assert.equal(again.receivedMessageItems[0].dequeueCount, 2);
  await q.deleteMessage(again.receivedMessageItems[0].messageId, again.receivedMessageItems[0].popReceipt);
  await assert.rejects(q.deleteMessage(m.messageId, m.popReceipt), (e) => e.statusCode === 404 && e.code === "MessageNotFound");
  await q.clearMessages();
  await q.delete();
});

test("64 KiB of UTF-8 with special characters, and 413 beyond", async () => {
  const q = svc.getQueueClient("jsqueue3");
  await q.create();
  let text = "<>&\"'" + "中".repeat(Math.floor((65536 - 5) / 3));
  text += "a".repeat(65536 - Buffer.byteLength(text));
  await q.sendMessage(text);
  const got = await q.receiveMessages();
  assert.equal(got.receivedMessageItems[0].messageText, text);
  await assert.rejects(q.sendMessage("a".repeat(65537)), (e) => e.statusCode === 413 && e.code === "RequestBodyTooLarge");
  await q.delete();
});

test("account SAS", async () => {
  const cred = new StorageSharedKeyCredential(ACCOUNT, KEY);
  const sas = generateAccountSASQueryParameters({
    expiresOn: new Date(Date.now() + 3600_000),
    permissions: AccountSASPermissions.parse("rwdlacup"),
    resourceTypes: AccountSASResourceTypes.parse("sco").toString(),
    services: AccountSASServices.parse("q").toString(),
  }, cred).toString();
  const sasSvc = new QueueServiceClient(`${scheme}://127.0.0.1:${port}/${ACCOUNT}?${sas}`);
  const q = sasSvc.getQueueClient("jsqueue4");
  await q.create();
  await q.sendMessage("via account sas");
  const got = await q.receiveMessages();
  assert.equal(got.receivedMessageItems[0].messageText, "via account sas");
  await q.delete();
});

test("service properties and a wrong key", async () => {
  const props = await svc.getProperties();
  assert.equal(props.cors.length, 0);
  const bad = new QueueServiceClient(`${scheme}://127.0.0.1:${port}/${ACCOUNT}`, new StorageSharedKeyCredential(ACCOUNT, Buffer.from("wrong key").toString("base64")));
  await assert.rejects(bad.getProperties(), (e) => e.statusCode === 403 && e.code === "AuthenticationFailed");
});
