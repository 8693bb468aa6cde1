// Which ingestion failures a record causes (its batch is then ingested record by record and the
// record set aside) and which mean the database is unavailable (the batch fails, no ack).
import t from 'tap';
import { isRecordDataError, recordDataErrorDetail } from '../../../control-plane/src/records/record-data-error.js';

const pgError = (code: string): Error => Object.assign(new Error(`failed: "9999-99-99"`), { code });

t.test('data exceptions, integrity violations and errors building a statement are the record\'s', async (t) => {
  for (const code of ['22008', '22009', '22P02', '22003', '23502', '23503', '23514']) t.ok(isRecordDataError(pgError(code)), code);
  t.ok(isRecordDataError(new RangeError('Invalid time value')), 'RangeError');
  t.ok(isRecordDataError(new TypeError('x is undefined')), 'TypeError');
});

t.test('conflicts and an unavailable database are not', async (t) => {
  for (const code of ['23505', '23P01', '57P01', '08006', '40001', '40P01', '53300', 'ECONNRESET', 'ECONNREFUSED']) t.notOk(isRecordDataError(pgError(code)), code);
  t.notOk(isRecordDataError(new Error('Connection terminated unexpectedly')), 'a plain error');
  t.notOk(isRecordDataError(undefined), 'nothing');
});

t.test('the detail names the SQLSTATE or the error class, never the message', async (t) => {
  t.equal(recordDataErrorDetail(pgError('22009')), 'the control plane could not store this record (SQLSTATE 22009)');
  t.equal(recordDataErrorDetail(new RangeError('Invalid time value 8700000000000000')), 'the control plane could not store this record (RangeError)');
});
