// A fetch for the model endpoint that reads at most a given number of bytes of a reply: a model's
// output is the one input the host does not choose, and a runaway or hostile endpoint must not make
// it hold (or parse, or redact) megabytes.

/** A reply body larger than the bound: reading stopped there. */
export class ResponseTooLargeError extends Error {
  constructor(maxBytes: number) {
    super(
      `chat completions returned a body of more than ${maxBytes} bytes, the most the host reads; the model's reply was not used`,
    );
  }
}

/** fetch whose response body errors with ResponseTooLargeError once more than `maxBytes` arrived (or are announced). */
export function boundedFetch(maxBytes: number): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    if (!response.body) return response;
    if (Number(response.headers.get("content-length") ?? 0) > maxBytes) {
      await response.body.cancel();
      throw new ResponseTooLargeError(maxBytes);
    }
    let seen = 0;
    const limit = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        seen += chunk.byteLength;
        if (seen > maxBytes) controller.error(new ResponseTooLargeError(maxBytes));
        else controller.enqueue(chunk);
      },
    });
    return new Response(response.body.pipeThrough(limit), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}
