// {note}
const spiece = new Uint8Array(await (await fetch("{name}")).arrayBuffer());
