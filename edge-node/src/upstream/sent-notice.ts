/**
 * When a request has been written whole to its connection: from then on the server has it and
 * works on it whether or not its answer is read, so a caller that leaves afterwards is charged
 * (docs/billing.md: a model's prompt, "Stage settle"; a tool call, "Tool calls"). undici's request()
 * gives no such signal; its dispatch handler does (onRequestSent).
 */
import { Dispatcher } from 'undici';

/** Hands each request to `inner`, calling `onSent` once undici has written it whole. */
export class SentNotice extends Dispatcher {
  constructor(private readonly inner: Dispatcher, private readonly onSent: () => void) {
    super();
  }

  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    // undici calls a request handler's onRequestSent (absent from its types) after writing the body;
    // the handler is this one request's own (Dispatcher.request made it), so it is added there.
    const request = handler as Dispatcher.DispatchHandler & { onRequestSent?: () => void };
    const own = request.onRequestSent;
    request.onRequestSent = () => {
      own?.call(request);
      this.onSent();
    };
    return this.inner.dispatch(options, request);
  }
}
