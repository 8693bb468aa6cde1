// Each built-in detector with true and false cases: checksums valid and not, near-miss shapes,
// digits inside longer runs, and Chinese text around the matches.
import t from 'tap';
import { findBankCards, luhnValid } from '../../../edge-node/src/guardrails/detectors/bank-card.js';
import type { Match } from '../../../edge-node/src/guardrails/detectors/detector.js';
import { findEmails } from '../../../edge-node/src/guardrails/detectors/email.js';
import { compileKeywords } from '../../../edge-node/src/guardrails/detectors/keywords.js';
import { findPhones } from '../../../edge-node/src/guardrails/detectors/phone.js';
import { findPrcResidentIds, prcIdChecksumValid } from '../../../edge-node/src/guardrails/detectors/prc-resident-id.js';
import { compileRegex } from '../../../edge-node/src/guardrails/detectors/regex.js';
import { findSecrets } from '../../../edge-node/src/guardrails/detectors/secret.js';

type Find = (text: string, from?: number) => Match[];
const found = (find: Find, text: string): string[] => find(text).map((m) => text.slice(m.start, m.end));

t.test('email finds addresses inside Chinese text and leaves near misses alone', async (t) => {
  t.same(found(findEmails, '请联系 zhang.san@example.com。谢谢'), ['zhang.san@example.com']);
  t.same(found(findEmails, 'ops+alerts@mail.example.co.uk, then a.b-c@x-y.io.'), ['ops+alerts@mail.example.co.uk', 'a.b-c@x-y.io']);
  t.same(found(findEmails, 'user@localhost, user@@example.com, @example.com, a@b.c, .a@example.com, name@-bad.com'), []);
  t.same(found(findEmails, 'no at sign here: example.com'), []);
  t.same(found(findEmails, '写信给 ivan@example.xn--p1ai 或 info@xn--80ak6aa92e.com。'), ['ivan@example.xn--p1ai', 'info@xn--80ak6aa92e.com'], 'punycode top-level labels (.рф)');
});

t.test('phone finds mainland mobiles in every usual writing and international E.164 numbers', async (t) => {
  t.same(found(findPhones, '手机13800138000，请回电'), ['13800138000']);
  t.same(found(findPhones, '打 138 0013 8000 或 138-0013-8000'), ['138 0013 8000', '138-0013-8000']);
  t.same(found(findPhones, '+86 13800138000、+8613912345678、0086 15900001111、(+86) 186 1234 5678'), ['+86 13800138000', '+8613912345678', '0086 15900001111', '(+86) 186 1234 5678']);
  t.same(found(findPhones, 'US +1 415-555-2671, UK +44 20 7946 0958, DE +49 (30) 123456'), ['+1 415-555-2671', '+44 20 7946 0958', '+49 (30) 123456']);
});

t.test('phone refuses digits that are part of a longer run and shapes that are not mobiles', async (t) => {
  t.same(found(findPhones, '订单号 213800138000 和 138001380001 和 12800138000'), [], 'longer runs and 12x prefixes');
  t.same(found(findPhones, '2024-13800138000'), [], 'glued to a number by a dash');
  t.same(found(findPhones, '+1 234, +12 345 67'), [], 'too few digits for E.164');
  t.same(found(findPhones, '+1-234-567-890-123-456-789'), [], 'too many digits for E.164, joined by dashes');
  t.same(found(findPhones, '1380013800'), [], 'ten digits');
});

t.test('a + number followed by a space and more digits is found: a space does not join runs', async (t) => {
  t.same(found(findPhones, 'Call +44 20 7946 0958 2024 01 15 to confirm.'), ['+44 20 7946 0958'], 'then a date');
  t.same(found(findPhones, 'Office: +1 415 555 2671 94103 San Francisco'), ['+1 415 555 2671'], 'then a ZIP code');
  t.same(found(findPhones, 'Tel +49 30 12345678 0800 hotline'), ['+49 30 12345678']);
  t.same(found(findPhones, '+44 20 7946 0958 13812345678'), ['+44 20 7946 0958', '13812345678'], 'the groups left off are scanned again');
  t.same(found(findPhones, '+1 234 567 890 123 456 789'), ['+1 234 567 890 123'], 'the longest head of 15 digits or fewer');
  t.same(found(findPhones, '+12 3456 78901234567'), [], 'no head of 8 to 15 digits');
});

t.test('phone finds numbers grouped with dots, mainland and international', async (t) => {
  t.same(found(findPhones, '手机 138.1234.5678，请回电'), ['138.1234.5678']);
  t.same(found(findPhones, '+86 138.1234.5678 或 +86.139.1234.5678 或 0086 150.0000.1111'), ['+86 138.1234.5678', '+86.139.1234.5678', '0086 150.0000.1111']);
  t.same(found(findPhones, 'US +1.415.555.2671, UK +44.20.7946.0958, FR +33.1.23.45.67.89.'), ['+1.415.555.2671', '+44.20.7946.0958', '+33.1.23.45.67.89']);
  t.same(found(findPhones, 'call 138.1234.5678.'), ['138.1234.5678'], 'a full stop after the number is punctuation');
});

t.test('phone refuses dotted numbers that are IPs, versions or decimals', async (t) => {
  t.same(found(findPhones, 'host 10.0.0.138 and 192.168.138.12'), [], 'IPv4 addresses');
  t.same(found(findPhones, 'version 1.2.3, 13.8.1234, v138.1234.5678.9'), [], 'version numbers, also a phone shape continued by .9');
  t.same(found(findPhones, '138.1234.5678.9 and 9.138.1234.5678'), [], 'a phone shape inside a longer dotted run');
  t.same(found(findPhones, '138.12345678 and 1381234.5678'), [], 'one dot reads as a decimal');
  t.same(found(findPhones, 'lat +37.7749295, +1.2.3.4, +10.0.0.138'), [], 'a signed decimal, and dotted + shapes with too few digits');
  t.same(found(findPhones, '138..1234..5678, +1..415.555.2671'), [], 'doubled dots');
  t.same(found(findPhones, 'build +2024.11.30.1200, version +1.2.3.4.5.6.7.8.9'), [], 'dated tags and versions written with a +');
});

t.test('phone still finds plain numbers next to dots: a float export, a numbered list, a decimal point', async (t) => {
  t.same(found(findPhones, 'phone,13812345678.0,name'), ['13812345678'], 'a spreadsheet float');
  t.same(found(findPhones, '+8613812345678.0 and +14155552671.0'), ['+8613812345678', '+14155552671']);
  t.same(found(findPhones, '1. 13812345678 No. 13912345678'), ['13812345678', '13912345678'], 'list numbering');
  t.same(found(findPhones, '13812345678.13912345678'), ['13812345678', '13912345678'], 'two numbers joined by a dot');
});

t.test('phone takes no number from the fraction of a number nor from digits glued inside a hash or UUID, and still finds numbers beside words', async (t) => {
  t.same(found(findPhones, '{"p":0.14680662540,"x":47.18860501045} and 1.13812345678'), [], 'a fraction of 11 decimals, also after a one-digit number');
  t.same(found(findPhones, 'trace bcf025c1-e156-4443-8409-a3f60c2d9e14'), [], 'a UUID');
  t.same(found(findPhones, 'commit 5b73c7307d19658410988d1b7b6cc0c83b6f1f0863a529848a3069118f1e0adc done'), [], 'a SHA-256');
  t.same(
    found(findPhones, 'tel 138-1234-5678；手机13912345678，wxid15012345678 QQ:18612345678 (13712345678) abc13512345678 13612345678abc'),
    ['138-1234-5678', '13912345678', '15012345678', '18612345678', '13712345678', '13512345678', '13612345678'],
    'beside words, CJK and punctuation, and hex letters on one side only',
  );
  t.same(found(findPhones, '+86 13812345678abc1 (+86) 139 1234 5678cafe1'), ['+86 13812345678', '(+86) 139 1234 5678'], 'a number written with its country code');
});

t.test('PRC resident ID accepts valid MOD 11-2 checksums (X included) with plausible birth dates', async (t) => {
  t.ok(prcIdChecksumValid('11010519491231002X'));
  t.ok(prcIdChecksumValid('11010519491231002x'), 'a lower-case x is the same check character');
  t.ok(prcIdChecksumValid('440304199001011233'));
  t.notOk(prcIdChecksumValid('440304199001011234'));
  t.same(found(findPrcResidentIds, '身份证号：11010519491231002X，住址北京'), ['11010519491231002X']);
  t.same(found(findPrcResidentIds, '证件 310115200002295674 与 440304 19900101 1233'), ['310115200002295674', '440304 19900101 1233'], 'a leap day; grouped 6 8 4');
});

t.test('PRC resident ID refuses bad checksums, impossible dates and longer digit runs', async (t) => {
  t.same(found(findPrcResidentIds, '11010519491231002Y 110105194912310021 440304199001011234'), [], 'wrong check characters');
  t.same(found(findPrcResidentIds, '1440304199001011233 4403041990010112331'), [], 'inside longer runs');
  // The checksums below are valid; only the dates are wrong (Feb 29 of a non-leap year, month 13, 1880).
  t.same(found(findPrcResidentIds, '310115200102295671 310115200013015670 440524188001010014'), []);
});

t.test('bank card accepts Luhn-valid numbers of 13 to 19 digits, plain or grouped', async (t) => {
  t.ok(luhnValid('4111111111111111'));
  t.notOk(luhnValid('4111111111111112'));
  t.same(found(findBankCards, '卡号4111 1111 1111 1111，谢谢'), ['4111 1111 1111 1111']);
  t.same(found(findBankCards, 'amex 3782-822463-10005 visa 41111111111114 unionpay 6222021234567890128'), ['3782-822463-10005', '41111111111114', '6222021234567890128']);
  t.same(found(findBankCards, 'on 2024-01-01 4111 1111 1111 1111 was charged'), ['4111 1111 1111 1111'], 'a date glued on by a space is not part of the card');
  t.same(found(findBankCards, 'paid 2024-01-15 4111111111111111'), ['4111111111111111'], 'an ungrouped card after a date and a space');
  t.same(found(findBankCards, '订单 20240115 6222021234567890128'), ['6222021234567890128'], 'after an order number');
  t.same(found(findBankCards, 'qty 2 4111111111111111 ok'), ['4111111111111111'], 'after a short number');
  t.same(found(findBankCards, 'tel 13812345678 5555555555554444 and 2024-01-15 378282246310005'), ['5555555555554444', '378282246310005']);
  t.same(found(findBankCards, 'ref 1-4111111111111111 and 4111111111111111-7'), [], 'a dash glues a group to its neighbour: an id, not a card');
});

t.test('bank card masks every card a run of groups holds, the union of overlapping ones, not only the leftmost', async (t) => {
  // 30003 4532 0151 (13 digits) and 3006 4532 0151 1283 (16) are Luhn-valid too, and end inside the real card.
  t.same(found(findBankCards, 'paid 30003 4532 0151 1283 0366 ok'), ['30003 4532 0151 1283 0366']);
  t.same(found(findBankCards, 'paid 3006 4532 0151 1283 0366 ok'), ['3006 4532 0151 1283 0366']);
  t.same(found(findBankCards, 'Qty 2 Amount 3560 4532 0151 1283 0366'), ['4532 0151 1283 0366'], 'a group before the card that makes no card with it');
  t.same(found(findBankCards, '4111 1111 1111 1111 5555 5555 5555 4444'), ['4111 1111 1111 1111', '5555 5555 5555 4444'], 'cards that do not overlap stay two');
});

t.test('bank card takes no card from the fraction of a number: scores, coordinates', async (t) => {
  t.same(found(findBankCards, '{"score":0.5533538169896861}'), [], 'a random double');
  t.same(found(findBankCards, '{"lat":37.23804008168112,"lng":116.40739846408121} -0.4532015112830366'), [], 'coordinates and a negative fraction');
  t.same(found(findBankCards, 'v1.2.4532015112830366 and 1.4532015112830366'), [], 'after a dotted version and a one-digit number');
  t.same(
    found(findBankCards, 'card 4532015112830366. Exported 4532015112830366.0, 0.5 4532 0151 1283 0366, 13812345678.5555555555554444'),
    ['4532015112830366', '4532015112830366', '4532 0151 1283 0366', '5555555555554444'],
    'a full stop or decimals after a card, a card after a fraction and a space, and after a long number and a dot',
  );
});

t.test('bank card takes no card from digits glued inside a hash or UUID, and still finds cards beside words, CJK and punctuation', async (t) => {
  t.same(found(findBankCards, 'request_id=23253005-4391-4e65-8a3c-1234abcd5678'), [], 'a UUID whose groups make 13 Luhn-valid digits');
  t.same(found(findBankCards, 'x=550e8400-e29b-41d4-8123-4532015112830366 commit 3ca268744c642ee7fe34016dede5b58401817697601adc0286f4a2103f92a854'), [], 'the last groups of a UUID, a SHA-256');
  t.same(found(findBankCards, 'sha deadbeef4111111111111111cafe'), [], 'hex letters on both sides');
  t.same(
    found(findBankCards, '卡号6222021234567890128，card:4532015112830366 (4532 0151 1283 0366) card4532015112830366 Visa4111111111111111 CC5555555555554444 AE378282246310005 q=card%3A4532015112830366&x=1 4111111111111111abc'),
    ['6222021234567890128', '4532015112830366', '4532 0151 1283 0366', '4532015112830366', '4111111111111111', '5555555555554444', '378282246310005', '4532015112830366', '4111111111111111'],
    'a word on one side, hex letters or not, and a URL escape are no hex token',
  );
});

t.test('bank card refuses Luhn failures, timestamps, long runs and phone numbers', async (t) => {
  t.same(found(findBankCards, '4111 1111 1111 1112 and 5200828282828211'), [], 'Luhn failures');
  t.same(found(findBankCards, 'ts 1732900000005'), [], 'a millisecond timestamp (starts with 1) even when Luhn-valid');
  t.same(found(findBankCards, '94111111111111111 41111111111111110000'), [], 'inside longer runs');
  t.same(found(findBankCards, '411111111111'), [], 'twelve digits');
  t.same(found(findBankCards, '+4111111111111111'), [], 'a phone-style number');
});

t.test('bank card leaves order numbers and date-time stamps written yyyyMMddHHmmss alone, Luhn-valid or not', async (t) => {
  t.ok(luhnValid('20240115093005'), 'this order number passes Luhn: only its 20 prefix tells it from a card');
  t.same(found(findBankCards, '请帮我查一下订单 20240115093005 的物流，交易流水号：20240115093021，log ts=20250301120000002 level=INFO'), []);
  let taken = 0;
  for (let minute = 0; minute < 24 * 60; minute++) {
    const hhmm = String(Math.floor(minute / 60) * 100 + (minute % 60)).padStart(4, '0');
    if (findBankCards(`订单号 20240115${hhmm}00`).length > 0) taken++;
  }
  t.equal(taken, 0, 'the order numbers of every minute of a day');
  t.same(found(findBankCards, '2100000000000005 2210000000000002 2721000000000004'), [], 'Luhn-valid 2-series numbers outside the Mir and Mastercard ranges');
});

t.test('bank card still finds the test numbers of every brand, Mastercard 2-series and Mir included', async (t) => {
  const cards = [
    '2221000000000009', // Mastercard 2-series, first and last of its range
    '2720990000000007',
    '2200000000000004', // Mir
    '2204000000000000',
    '5555555555554444', // Mastercard
    '4111111111111111', // Visa
    '378282246310005', // Amex
    '3530111333300000', // JCB
    '3112000000000009', // JCB's older 31xx range
    '30569309025904', // Diners
    '36227206271667',
    '6222021234567890128', // UnionPay
    '6011111111111117', // Discover
  ];
  t.same(found(findBankCards, cards.join(' ')), cards);
});

t.test('secret finds provider key shapes, PEM blocks, JWTs and assigned secrets', async (t) => {
  const aws = 'AKIAIOSFODNN7EXAMPLE';
  const gh = `ghp_${'a1B2'.repeat(9)}`;
  const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl';
  const pem = '-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----';
  const text = [
    'openai sk-proj-Abc123Def456Ghi789Jkl0',
    'anthropic sk-ant-api03-Abc123Def456Ghi789Jkl0',
    `aws ${aws}`,
    `github ${gh} github_pat_11ABCDEFG0123456789_abcdefghij`,
    'slack xoxb-1234567890-abcdef',
    `google AIza${'B'.repeat(35)}`,
    `jwt ${jwt}`,
    pem,
  ].join('\n');
  t.same(found(findSecrets, text), [
    'sk-proj-Abc123Def456Ghi789Jkl0',
    'sk-ant-api03-Abc123Def456Ghi789Jkl0',
    aws,
    gh,
    'github_pat_11ABCDEFG0123456789_abcdefghij',
    'xoxb-1234567890-abcdef',
    `AIza${'B'.repeat(35)}`,
    jwt,
    pem,
  ]);
  t.same(found(findSecrets, 'api_key = "s3cr3tV4lue!x" and "password": "hunter2hunter2" and 密码：abc12345xyz'), ['s3cr3tV4lue!x', 'hunter2hunter2', 'abc12345xyz'], 'only the value is the match');
  t.same(found(findSecrets, '-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC'), ['-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC'], 'an unterminated key block is covered to the end');
});

t.test('secret takes a quoted value whole, spaces and all, up to its closing quote', async (t) => {
  t.same(found(findSecrets, 'password = "correct horse battery staple" ok'), ['correct horse battery staple']);
  t.same(found(findSecrets, 'password: "Tr0ub4dor&3 xyz", next'), ['Tr0ub4dor&3 xyz']);
  t.same(found(findSecrets, `{"db_password": "my long pass phrase", "user": "app"}`), ['my long pass phrase'], 'JSON');
  t.same(found(findSecrets, "secret = 'two words here'"), ['two words here'], 'single quotes');
  t.same(found(findSecrets, 'token = "abcdefgh12345678'), ['abcdefgh12345678'], 'an unclosed quote: the first word, as unquoted');
});

t.test('secret ends an unquoted value at Chinese and full-width punctuation, not only ASCII', async (t) => {
  const text = '您的初始密码：Tmp2024ab，有效期24小时，请登录后立即修改。';
  t.same(found(findSecrets, text), ['Tmp2024ab']);
  t.same(found(findSecrets, '密码：Abc12345。口令：Xyz67890；令牌：Tok12345、密钥：Key12345！token=qwertyui）secret=asdfghjk」pwd=zxcvbnm1』'), ['Abc12345', 'Xyz67890', 'Tok12345', 'Key12345', 'qwertyui', 'asdfghjk', 'zxcvbnm1']);
});

t.test('secret runs an unquoted value on past a typographic apostrophe, and past CJK punctuation that comes before its 8 characters', async (t) => {
  t.same(found(findSecrets, 'The password: Don’tTellAnyone42 for the VPN.'), ['Don’tTellAnyone42'], 'an apostrophe inside the value');
  t.same(found(findSecrets, 'passwd=It’s-a-Secret-2024'), ['It’s-a-Secret-2024'], 'an apostrophe after two characters');
  t.same(found(findSecrets, 'api_key=sk-ab，cdefghijklmnop'), ['sk-ab，cdefghijklmnop'], 'a full-width comma after five characters');
  t.same(found(findSecrets, '密码：abc。defghijk 然后'), ['abc。defghijk'], 'a full stop after three characters');
  t.same(found(findSecrets, 'pwd=zxcvbnm1” and token=abcdefgh’'), ['zxcvbnm1”', 'abcdefgh’'], 'a closing quote nothing opened is part of the value');
  t.same(found(findSecrets, 'password: “shortpw”, and secret: ‘abc’defghijk'), [], 'a closing quote ends the value its opening quote began');
});

t.test('secret takes a value in typographic quotes whole, spaces and all', async (t) => {
  t.same(found(findSecrets, 'password: “correct horse battery staple” ok'), ['correct horse battery staple']);
  t.same(found(findSecrets, '密码：“correct horse battery staple”，请牢记'), ['correct horse battery staple']);
  t.same(found(findSecrets, "secret = ‘two words here’ and 口令：「三个 词 的口令」 and 令牌：『one more passphrase』"), ['two words here', '三个 词 的口令', 'one more passphrase']);
  t.same(found(findSecrets, '“password”: “my pass phrase”'), ['my pass phrase'], 'a name in typographic quotes too');
  t.same(found(findSecrets, 'token = “abcdefgh12345678 and more'), ['abcdefgh12345678'], 'an unclosed quote: the first word, as unquoted');
});

t.test('secret skips names whose last word says the value is about a secret (a URL, a name, a type), not one', async (t) => {
  t.same(
    found(findSecrets, 'token_endpoint: https://oauth2.googleapis.com/token TOKEN_URL = "https://github.com/login/oauth/access_token" password_reset_url: https://example.com/reset passwordResetURL=https://example.com/r2 secret_name: prod-db-password token_type: BearerToken secrets_path: /run/secrets/db'),
    [],
  );
  t.same(
    found(findSecrets, 'SECRET_KEY=abcdefgh1 api_token_value: abcdefgh2 client_secret=abcdefgh3 url_token=abcdefgh4 tokenUrl2: abcdefgh5'),
    ['abcdefgh1', 'abcdefgh2', 'abcdefgh3', 'abcdefgh4', 'abcdefgh5'],
    'other last words, a secret word last, a name ending in a digit',
  );
});

t.test('secret names say secret only when the word ends the name: plurals and camelCase yes, tokenizer and secretary no', async (t) => {
  t.same(found(findSecrets, 'tokenizer: cl100k_base, tokenization: byte-level, secretary: JohnSmith, TOKENIZER: o200k_base'), []);
  t.same(
    found(findSecrets, 'client_secret=abcdefgh1 accessToken: abcdefgh2 SECRET_KEY=abcdefgh3 tokens: abcdefgh4 aws_secret_access_key=abcdefgh5 apiKey2: abcdefgh6'),
    ['abcdefgh1', 'abcdefgh2', 'abcdefgh3', 'abcdefgh4', 'abcdefgh5', 'abcdefgh6'],
  );
});

t.test('secret leaves near-miss shapes alone', async (t) => {
  t.same(
    found(findSecrets, 'task-abcdefghijklmnopqrstuvwxyz0123 sk-short AKIAIOSFODNN7 AKIAIOSFODNN7EXAMPLEX ghp_tooShort xoxq-1234567890-abcdef eyJhbGciOiJ9.notajwt'),
    [],
  );
  t.same(found(findSecrets, 'max_tokens = 100000000, token: short, the password is hunter2, secret santa'), [], 'numbers, short values, prose');
  t.same(found(findSecrets, '-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----'), [], 'public keys are not secrets');
});

t.test('keywords match case-insensitively, whole ASCII words only, CJK anywhere, leftmost-longest', async (t) => {
  const find = compileKeywords(['Project Phoenix', 'ass', '机密', 'project']);
  t.same(found(find, 'About PROJECT PHOENIX: class assignment, ass, 这是机密文件。'), ['PROJECT PHOENIX', 'ass', '机密']);
  t.same(found(find, 'projects and projection'), [], 'no partial ASCII words');
  t.same(found(compileKeywords([]), 'anything'), []);
  t.same(found(compileKeywords(['ab', 'b']), 'ab b'), ['ab', 'b']);
});

t.test('keywords read full-width letters as ASCII, in the text and in the list', async (t) => {
  const find = compileKeywords(['VPN', 'password', 'ＶＩＰ']);
  t.same(found(find, '怎么用ＶＰＮ翻墙'), ['ＶＰＮ']);
  t.same(found(find, 'my ｐａｓｓｗｏｒｄ is ...'), ['ｐａｓｓｗｏｒｄ']);
  t.same(found(find, 'VIP 客户名单，ｖｉｐ'), ['VIP', 'ｖｉｐ'], 'a keyword written full-width matches ASCII text');
  t.same(found(find, 'ＶＰＮｓ ｘVPN ｐａｓｓｗｏｒｄ１'), [], 'full-width letters and digits glue words as ASCII ones do');
  t.same(found(compileKeywords(['top secret']), 'ＴＯＰ\u3000ＳＥＣＲＥＴ'), ['ＴＯＰ\u3000ＳＥＣＲＥＴ'], 'the ideographic space is a space');
});

t.test('keywords fold case as Unicode does: Greek final sigma, the dotted capital I, the long s', async (t) => {
  t.same(found(compileKeywords(['ΚΩΔΙΚΟΣ']), 'ο κωδικος ειναι'), ['κωδικος'], 'a capital keyword matches the final sigma');
  t.same(found(compileKeywords(['κωδικος']), 'Ο ΚΩΔΙΚΟΣ ΕΙΝΑΙ'), ['ΚΩΔΙΚΟΣ'], 'a keyword with a final sigma matches capitals');
  t.same(found(compileKeywords(['κωδικοσ']), 'κωδικος'), ['κωδικος'], 'medial and final sigma are one letter');
  t.same(found(compileKeywords(['istanbul']), 'İSTANBUL and İstanbul'), ['İSTANBUL', 'İstanbul']);
  t.same(found(compileKeywords(['İstanbul']), 'istanbul'), ['istanbul']);
  t.same(found(compileKeywords(['password']), 'paſſword'), ['paſſword']);
  t.same(found(compileKeywords(['sik']), 'bunu sık sık yaparım'), [], 'the dotless ı is not i, as Unicode folds it');
  t.same(found(compileKeywords(['straße']), 'STRAßE strasse'), ['STRAßE'], 'ß stays one letter: positions never move');
});

t.test("regex compiles a policy's pattern once, honours (?i), skips empty matches and reports patterns that do not compile", async (t) => {
  const ok = compileRegex('(?i)order-\\d{4}');
  t.ok(ok.ok);
  if (ok.ok) t.same(found(ok.detector.find, 'Order-1234 and ORDER-99 and order-5678'), ['Order-1234', 'order-5678']);
  const legacy = compileRegex('a\\-b');
  t.ok(legacy.ok, 'a pattern that only compiles without Unicode mode still compiles');
  const empty = compileRegex('x*');
  t.ok(empty.ok);
  if (empty.ok) t.same(found(empty.detector.find, 'a xx b'), ['xx']);
  const bad = compileRegex('(unclosed');
  t.notOk(bad.ok);
  if (!bad.ok) t.match(bad.reason, /does not compile/);
  t.notOk(compileRegex(undefined).ok, 'a regex rule without a pattern');
});

t.test('detectors scan from an offset and use the text before it only as context', async (t) => {
  const text = '1213800138000 13800138000';
  t.same(findPhones(text, 2), [{ start: 14, end: 25 }], 'the run that started before the offset is still a longer run');
  t.same(findEmails('x a@example.com', 2), [{ start: 2, end: 15 }]);
});

t.test('secret finds an assignment in a whole text however long its name or the blanks after its separator', async (t) => {
  t.same(found(findSecrets, `password:${' '.repeat(18)}Tr0ub4dor&3xyz`), ['Tr0ub4dor&3xyz']);
  t.same(found(findSecrets, `PASSWORD${'_X'.repeat(40)}=Tr0ub4dor3xyz`), ['Tr0ub4dor3xyz']);
  t.same(found(findSecrets, `api_key =${'\t'.repeat(18)}"sk-live-abcdefgh"`), ['sk-live-abcdefgh']);
});
