// A user's session with the official @a2a-js/sdk client over gRPC, against a gateway.
// Run with NODE_PATH naming the SDK's node_modules (tests/clients/jssdk.py):
// `node a2a_js_grpc.mjs BASE_URL API_KEY`. Prints one JSON object: what the client saw.
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';

// ES modules ignore NODE_PATH: resolve the SDK from the directory it names.
const require = createRequire(join(process.env.NODE_PATH, 'noop.js'));
const sdk = await import(require.resolve('@a2a-js/sdk'));
const { ClientFactory, ClientFactoryOptions } = await import(require.resolve('@a2a-js/sdk/client'));
const { GrpcTransportFactory } = await import(require.resolve('@a2a-js/sdk/client/grpc'));
const { Role, TaskState } = sdk;

const [GW, KEY] = process.argv.slice(2);
const options = { serviceParameters: { authorization: `Bearer ${KEY}` } };
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new GrpcTransportFactory()],
    preferredTransports: ['GRPC'],
  }),
);
// The card's full URL, and '' for its path (a path is resolved against the origin).
const client = await factory.createFromUrl(`${GW}/agents/echo/.well-known/agent-card.json`, '');

const part = (content) => ({ content, metadata: undefined });
function request(parts, { metadata, returnImmediately = false } = {}) {
  return {
    tenant: '',
    message: {
      messageId: randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts,
      metadata, extensions: [], referenceTaskIds: [],
    },
    configuration: {
      acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately,
    },
    metadata: undefined,
  };
}
const state = (task) => TaskState[task.status.state];
const report = {};

const vitals = { patient: { name: 'Zoë', age: 72 }, flags: [true, null] };
const sent = await client.sendMessage(
  request([part({ $case: 'text', value: 'vitals' }), part({ $case: 'data', value: vitals })]),
  options,
);
report.sent = { id: sent.id, contextId: sent.contextId, state: state(sent) };
const got = await client.getTask({ tenant: '', id: sent.id, historyLength: 1 }, options);
report.history = got.history.map((m) => Role[m.role]);
const all = await client.getTask({ tenant: '', id: sent.id }, options);
report.data = all.history[0].parts.map((p) => p.content.$case === 'data' ? p.content.value : null);
const listed = await client.listTasks(
  { tenant: '', contextId: sent.contextId, status: TaskState.TASK_STATE_UNSPECIFIED,
    pageSize: 10, pageToken: '' },
  options,
);
report.listed = listed.tasks.map((t) => t.id);

const working = await client.sendMessage(
  request([part({ $case: 'text', value: 'hold' })],
    { metadata: { echo: { finalState: 'working' } }, returnImmediately: true }),
  options,
);
const canceled = await client.cancelTask({ tenant: '', id: working.id, metadata: undefined }, options);
report.canceled = state(canceled);

report.stream = [];
const chunked = { echo: { chunks: 3, delayMs: 50 } };
for await (const event of client.sendMessageStream(
  request([part({ $case: 'text', value: 'abc' })], { metadata: chunked }), options)) {
  report.stream.push(event.payload.$case);
}
try {
  await client.getTask({ tenant: '', id: 'no-such-task' }, options);
  report.notFound = 'no error';
} catch (error) {
  report.notFound = error.constructor.name;
}
try {
  await client.getTask({ tenant: '', id: sent.id }, { serviceParameters: {} });
  report.anonymous = 'no error';
} catch (error) {
  report.anonymous = error.status;  // the gRPC status code
}
console.log(JSON.stringify(report));
