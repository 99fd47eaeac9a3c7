/**
 * Writes the learner contract derived from src/trainers/protocol.ts: the JSON Schema the Python
 * learner validates against (learner/mcp_gym_learner/protocol.schema.json) and the generated
 * tables of learner/PROTOCOL.md. `npx tsx scripts/gen-protocol.ts`; test/trainers/protocol.test.ts
 * fails when either is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { PROTOCOL_SCHEMA_FILE, PROTOCOL_DOC_FILE, renderProtocolDoc } from '../src/trainers/protocol-docs.ts';
import { protocolJsonText } from '../src/trainers/protocol.ts';

writeFileSync(PROTOCOL_SCHEMA_FILE, protocolJsonText());
writeFileSync(PROTOCOL_DOC_FILE, renderProtocolDoc(readFileSync(PROTOCOL_DOC_FILE, 'utf8')));
console.log(`wrote ${PROTOCOL_SCHEMA_FILE} and the tables of ${PROTOCOL_DOC_FILE}`);
