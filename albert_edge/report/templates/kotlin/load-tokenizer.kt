// {note}
val spiece = context.assets.open("{name}").readBytes()
